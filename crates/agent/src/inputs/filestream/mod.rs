//! `filestream` (in progress): the pure parts come first. The input that
//! tails files, keeps a registry of acknowledged offsets and resumes after
//! a restart is not built yet; `filestream` stays an input type this
//! version names but does not run.

pub mod parsers;

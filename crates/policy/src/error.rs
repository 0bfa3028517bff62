//! Errors that point at a place in a policy file.

use std::fmt;

/// A 1-based line and column in a source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord)]
pub struct Pos {
    /// Line, starting at 1.
    pub line: usize,
    /// Column in characters, starting at 1.
    pub column: usize,
}

impl Pos {
    /// A position.
    pub fn new(line: usize, column: usize) -> Self {
        Self { line, column }
    }
}

/// A problem found in a policy: where it is, what is wrong, how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PolicyError {
    /// The file name the caller gave with the text.
    pub file: String,
    /// Where the problem is.
    pub pos: Pos,
    /// What is wrong.
    pub message: String,
    /// How to fix it, when there is something useful to say.
    pub hint: Option<String>,
}

impl PolicyError {
    /// An error without a hint.
    pub fn new(file: &str, pos: Pos, message: impl Into<String>) -> Self {
        Self {
            file: file.to_string(),
            pos,
            message: message.into(),
            hint: None,
        }
    }

    /// Adds a hint saying how to fix the problem.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.pos.line, self.pos.column, self.message
        )?;
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

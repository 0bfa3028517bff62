//! The output types leasehold has. An output type is its own module (its
//! settings, how they are read, its sink) and one line in [`TYPES`]:
//! nothing else names it.

use super::kind::OutputType;
use super::{console, elasticsearch, file, otlp};

/// Every output type, by its `type` name in alphabetical order.
static TYPES: [&OutputType; 4] = [
    &console::TYPE,
    &elasticsearch::TYPE,
    &file::TYPE,
    &otlp::TYPE,
];

/// The type named `name`.
pub(crate) fn named(name: &str) -> Option<&'static OutputType> {
    TYPES.iter().copied().find(|t| t.name == name)
}

/// The names of every output type, in alphabetical order.
pub fn output_types() -> Vec<&'static str> {
    TYPES.iter().map(|t| t.name).collect()
}

#[cfg(test)]
mod tests {
    use super::super::console::ConsoleSettings;
    use super::super::file::FileSettings;
    use super::super::kind::OutputKind;
    use super::*;

    #[test]
    fn every_type_is_found_by_its_name_and_the_names_are_in_order() {
        let names = output_types();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        for name in names {
            assert_eq!(named(name).map(|t| t.name), Some(name));
        }
        assert!(named("kafka").is_none());
    }

    #[test]
    fn kinds_are_equal_only_with_the_same_type_and_settings() {
        let a = OutputKind::file(FileSettings::new("/a"));
        assert_eq!(a, OutputKind::file(FileSettings::new("/a")));
        assert_ne!(a, OutputKind::file(FileSettings::new("/b")));
        assert_ne!(a, OutputKind::console());
        assert_eq!(a.type_name(), "file");
        assert_eq!(
            a.get::<FileSettings>().map(|f| f.path.clone()),
            Some("/a".into())
        );
        assert!(a.get::<ConsoleSettings>().is_none());
    }
}

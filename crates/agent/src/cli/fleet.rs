//! The `--fleet` argument `run` and `elect` share.

/// `--fleet` (env `LEASEHOLD_FLEET`) of `run` and `elect`: unset or empty
/// means no rename fence; anything else must be a label value, checked
/// before anything runs.
pub fn fleet_arg(
    raw: Option<&str>,
) -> Result<Option<String>, leasehold_election::names::NameError> {
    match raw.filter(|f| !f.is_empty()) {
        None => Ok(None),
        Some(f) => leasehold_election::names::validate_label_value("--fleet (LEASEHOLD_FLEET)", f)
            .map(|()| Some(f.to_string())),
    }
}

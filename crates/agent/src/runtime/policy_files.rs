//! The files a policy is read from: the policy itself and, when given, a
//! directory of files of inputs (Elastic Agent's `inputs.d`), each adding
//! its `inputs:` to the policy's. Their texts are read together, so a
//! change to any of them is one reload.

use std::path::{Path, PathBuf};

use leasehold_policy::{Policy, PolicyError};

/// Where the policy comes from.
#[derive(Debug, Clone)]
pub struct PolicyFiles {
    /// The policy (`-c`).
    pub policy: PathBuf,
    /// `--inputs-dir`: its `*.yml` files, in name order. A directory that
    /// does not exist holds none (Elastic's manifest mounts it only when
    /// hints are used).
    pub inputs_dir: Option<PathBuf>,
}

/// The texts of the files, as read at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// The policy's text.
    pub policy: String,
    /// Each file of inputs: its path as shown in messages, and its text.
    pub inputs: Vec<(String, String)>,
}

impl PolicyFiles {
    /// Reads every file; an error names the file and what failed.
    pub fn read(&self) -> Result<Snapshot, String> {
        let policy = std::fs::read_to_string(&self.policy)
            .map_err(|e| format!("{}: cannot read: {e}", self.policy.display()))?;
        let mut inputs = Vec::new();
        if let Some(dir) = &self.inputs_dir {
            for path in input_files(dir)? {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
                inputs.push((path.display().to_string(), text));
            }
        }
        Ok(Snapshot { policy, inputs })
    }
}

/// The `*.yml` files of `dir` in name order, hidden ones left out (a
/// ConfigMap volume's `..data` links among them).
fn input_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(format!(
                "{}: cannot list the inputs directory: {e}",
                dir.display()
            ));
        }
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry
            .map_err(|e| format!("{}: cannot list the inputs directory: {e}", dir.display()))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || !name.ends_with(".yml") {
            continue;
        }
        let path = entry.path();
        // Through symlinks, as a ConfigMap volume links its files.
        if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

impl Snapshot {
    /// The policy with the inputs of every file added; warnings for what a
    /// file of inputs holds besides `inputs:`.
    pub fn parse(&self, policy_name: &str) -> Result<(Policy, Vec<String>), PolicyError> {
        let mut policy = Policy::parse(&self.policy, policy_name)?;
        let mut warnings = Vec::new();
        for (name, text) in &self.inputs {
            warnings.extend(policy.add_inputs_file(name, text)?);
        }
        Ok((policy, warnings))
    }

    /// Every text, for the redactor to learn the secrets written in them.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.policy.as_str()).chain(self.inputs.iter().map(|(_, t)| t.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_yml_files_of_the_directory_are_read_in_name_order_and_a_missing_one_holds_none() {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("agent.yml");
        std::fs::write(&policy, "outputs:\n  default: {type: console}\n").unwrap();
        let inputs = dir.path().join("inputs.d");
        let files = PolicyFiles {
            policy: policy.clone(),
            inputs_dir: Some(inputs.clone()),
        };
        assert!(files.read().unwrap().inputs.is_empty());
        std::fs::create_dir(&inputs).unwrap();
        // A ConfigMap volume: hidden data directory, visible links.
        let data = inputs.join("..data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("b.yml"), "inputs:\n  - {id: b, type: exec}\n").unwrap();
        std::os::unix::fs::symlink("..data/b.yml", inputs.join("b.yml")).unwrap();
        std::fs::write(inputs.join("a.yml"), "inputs:\n  - {id: a, type: exec}\n").unwrap();
        std::fs::write(inputs.join("notes.txt"), "not inputs").unwrap();
        std::fs::write(inputs.join(".hidden.yml"), "inputs: [x]").unwrap();
        let snap = files.read().unwrap();
        let names: Vec<&str> = snap
            .inputs
            .iter()
            .map(|(n, _)| n.rsplit('/').next().unwrap_or(n))
            .collect();
        assert_eq!(names, ["a.yml", "b.yml"]);
        let (p, warnings) = snap.parse("agent.yml").unwrap();
        assert!(warnings.is_empty());
        assert_eq!(p.inputs().len(), 2);
        assert_eq!(snap.texts().count(), 3);
        // A change in one file of inputs is a change of the whole.
        std::fs::write(inputs.join("a.yml"), "inputs:\n  - {id: a2, type: exec}\n").unwrap();
        assert_ne!(files.read().unwrap(), snap);
    }
}

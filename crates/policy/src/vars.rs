//! The variable store: what providers published, addressed as
//! `provider.path.to.value` (list items by index: `host.ip.0`).

use std::sync::Arc;

use crate::value::Value;

/// Variables by provider name. Each provider's variables are shared, so a
/// copy of the store that replaces one provider (a dynamic provider's
/// mapping, rendered once per Pod) does not copy the others.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Vars {
    /// In the order they were first set; a handful, looked up linearly.
    providers: Vec<(String, Arc<Value>)>,
}

impl Vars {
    /// An empty store: every lookup misses.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces everything provider `name` publishes.
    pub fn set_provider(&mut self, name: &str, value: Value) {
        let value = Arc::new(value);
        match self.providers.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v = value,
            None => self.providers.push((name.to_string(), value)),
        }
    }

    /// Builds a store from a JSON object mapping provider name to its
    /// variables, the `--vars` file format.
    pub fn from_json(v: &serde_json::Value) -> Result<Vars, String> {
        let serde_json::Value::Object(o) = v else {
            return Err(
                "the variables must be a JSON object mapping provider name to its variables, e.g. {\"env\": {\"HOSTNAME\": \"node-1\"}}"
                    .into(),
            );
        };
        let mut vars = Vars::new();
        for (name, value) in o {
            vars.set_provider(name, Value::from_json(value));
        }
        Ok(vars)
    }

    /// Whether provider `name` published anything.
    pub fn has_provider(&self, name: &str) -> bool {
        self.providers.iter().any(|(n, _)| n == name)
    }

    /// Provider names, in the order they were set.
    pub fn provider_names(&self) -> impl Iterator<Item = &String> {
        self.providers.iter().map(|(k, _)| k)
    }

    /// Looks a dotted name up. A present-but-null value counts as missing, so
    /// alternatives (`${a|b}`) move on to the next one.
    pub fn lookup(&self, name: &str) -> Option<&Value> {
        let (provider, rest) = match name.split_once('.') {
            Some((p, r)) => (p, Some(r)),
            None => (name, None),
        };
        let root = &**self
            .providers
            .iter()
            .find(|(n, _)| n == provider)
            .map(|(_, v)| v)?;
        let v = match rest {
            Some(path) => root.lookup_path(path)?,
            None => root,
        };
        (!matches!(v, Value::Null)).then_some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups() {
        let vars = Vars::from_json(&serde_json::json!({
            "host": {"name": "n1", "ip": ["10.0.0.1", "10.0.0.2"], "labels": {"a": null}},
            "kubernetes_leaderelection": {"leader": true}
        }))
        .unwrap();
        let cases: Vec<(&str, Option<Value>)> = vec![
            ("host.name", Some(Value::Str("n1".into()))),
            ("host.ip.1", Some(Value::Str("10.0.0.2".into()))),
            ("host.ip.2", None),
            ("host.ip.x", None),
            ("host.labels.a", None),
            ("host.name.deeper", None),
            ("kubernetes_leaderelection.leader", Some(Value::Bool(true))),
            ("missing.thing", None),
            ("nothing", None),
        ];
        for (name, want) in cases {
            assert_eq!(vars.lookup(name).cloned(), want, "{name}");
        }
        assert!(matches!(vars.lookup("host"), Some(Value::Map(_))));
    }

    #[test]
    fn vars_file_must_be_an_object() {
        assert!(Vars::from_json(&serde_json::json!([1])).is_err());
    }
}

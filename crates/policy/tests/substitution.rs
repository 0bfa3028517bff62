//! Table tests for `${…}` substitution.

use leasehold_policy::subst::{Resolved, parse, substitute};
use leasehold_policy::{Value, Vars};

fn vars() -> Vars {
    Vars::from_json(&serde_json::json!({
        "env": {"HOSTNAME": "node-a", "PORT": "9100", "EMPTY": ""},
        "host": {"name": "worker-1", "ip": ["10.0.0.5", "fd00::5"], "cpus": 8, "load": 0.5, "up": true,
                 "labels": {"zone": "a", "tier": "web"}},
        "local": {"ports": [9100, 9101], "team": "platform"}
    }))
    .unwrap()
}

fn s(x: &str) -> Resolved {
    Resolved::Value(Value::Str(x.into()))
}

#[test]
fn substitution_table() {
    let v = vars();
    let cases: Vec<(&str, Resolved)> = vec![
        ("plain text", s("plain text")),
        ("", s("")),
        ("cost: $5", s("cost: $5")),
        ("$ {not.a.var}", s("$ {not.a.var}")),
        ("${env.HOSTNAME}", s("node-a")),
        (
            "https://${host.name}:${env.PORT}/metrics",
            s("https://worker-1:9100/metrics"),
        ),
        // names without a dot go to the default provider (env here)
        ("${HOSTNAME}", s("node-a")),
        ("${ HOSTNAME }", s("node-a")),
        // alternatives and constants
        ("${env.MISSING|host.name}", s("worker-1")),
        ("${env.MISSING|'single'}", s("single")),
        ("${env.MISSING|\"double\"}", s("double")),
        (
            "${env.MISSING|'with space | and : inside'}",
            s("with space | and : inside"),
        ),
        ("${env.MISSING|env.ALSO_MISSING|'last'}", s("last")),
        ("${'only constant'}", s("only constant")),
        ("${env.HOSTNAME|'unused'}", s("node-a")),
        // `:` defaults, including empty ones
        ("${env.MISSING:fallback}", s("fallback")),
        ("${env.MISSING:}", s("")),
        ("${env.HOSTNAME:fallback}", s("node-a")),
        // every further `:` starts another constant: quote defaults with `:`
        ("${env.MISSING:http://localhost:9200}", s("http")),
        (
            "${env.MISSING:'http://localhost:9200'}",
            s("http://localhost:9200"),
        ),
        ("x-${env.MISSING:d}-y", s("x-d-y")),
        // escapes
        ("$${env.HOSTNAME}", s("${env.HOSTNAME}")),
        ("a $${x} b ${env.HOSTNAME}", s("a ${x} b node-a")),
        ("$$${env.HOSTNAME}", s("$${env.HOSTNAME}")),
        ("${env.MISSING|'it\\'s'}", s("it's")),
        // typed when the whole value is one variable
        ("${host.cpus}", Resolved::Value(Value::Int(8))),
        ("${host.load}", Resolved::Value(Value::Float(0.5))),
        ("${host.up}", Resolved::Value(Value::Bool(true))),
        (
            "${host.ip}",
            Resolved::Value(Value::List(vec![
                Value::Str("10.0.0.5".into()),
                Value::Str("fd00::5".into()),
            ])),
        ),
        (
            "${local.ports}",
            Resolved::Value(Value::List(vec![Value::Int(9100), Value::Int(9101)])),
        ),
        ("${env.MISSING|host.cpus}", Resolved::Value(Value::Int(8))),
        // ...but a constant alternative is text
        ("${env.MISSING|'8'}", s("8")),
        // unquoted, `8` is a variable name (of the default provider)
        (
            "${env.MISSING|8}",
            Resolved::NoMatch("${env.MISSING|env.8}".into()),
        ),
        // text inside longer strings
        ("cpus=${host.cpus}", s("cpus=8")),
        ("load=${host.load}", s("load=0.500000")),
        ("up=${host.up}", s("up=true")),
        ("ips=${host.ip}", s("ips=[10.0.0.5,fd00::5]")),
        ("labels=${host.labels}", s("labels={tier:web},{zone:a}")),
        (" ${host.cpus}", s(" 8")),
        ("${host.cpus}${host.cpus}", s("88")),
        ("${env.EMPTY}", s("")),
        // list items by index
        ("${host.ip.1}", s("fd00::5")),
        // unresolved
        ("${env.MISSING}", Resolved::NoMatch("${env.MISSING}".into())),
        (
            "pre ${env.MISSING} post",
            Resolved::NoMatch("${env.MISSING}".into()),
        ),
        ("${a.b|c.d}", Resolved::NoMatch("${a.b|c.d}".into())),
        ("${MISSING}", Resolved::NoMatch("${env.MISSING}".into())),
        // `$${}` is the literal text, not an empty reference
        ("a $${} b", s("a ${} b")),
        ("${host.ip.7}", Resolved::NoMatch("${host.ip.7}".into())),
        (
            "${env.MISSING|?}",
            Resolved::Optional("${env.MISSING|?}".into()),
        ),
        ("${env.HOSTNAME|?}", s("node-a")),
    ];
    for (src, want) in cases {
        let got = substitute(src, &v, "env").unwrap_or_else(|e| panic!("{src:?}: {e}"));
        assert_eq!(got, want, "{src:?}");
    }
}

#[test]
fn default_provider_is_configurable() {
    let v = vars();
    assert_eq!(substitute("${team}", &v, "local").unwrap(), s("platform"));
    assert_eq!(
        substitute("${HOSTNAME}", &v, "local").unwrap(),
        Resolved::NoMatch("${local.HOSTNAME}".into())
    );
}

#[test]
fn malformed_substitutions_are_errors_with_columns() {
    let cases = [
        ("${env.HOSTNAME", 1, "missing its ending"),
        ("ok ${", 4, "missing its ending"),
        ("${a.b[0]}", 1, "missing its ending"),
        ("${a}${b", 5, "missing its ending"),
        ("$${unclosed", 2, "missing its ending"),
        ("${env.}", 1, "cannot end with '.'"),
        ("${a|b.}", 1, "cannot end with '.'"),
        ("${a|'open}", 1, "missing ending '"),
        ("${a\\|b}", 1, "cannot be escaped"),
        ("${a\\:b}", 1, "cannot be escaped"),
        ("héllo ${x", 7, "missing its ending"),
        // an empty reference is a syntax error, as in Elastic Agent
        ("${}", 1, "empty variable reference"),
        ("x-${ }", 3, "empty variable reference"),
        ("${|}", 1, "empty variable reference"),
        ("${env.A}${}", 9, "empty variable reference"),
    ];
    for (src, col, msg) in cases {
        let e = parse(src, "env").unwrap_err();
        assert_eq!(e.column, col, "{src}: {e}");
        assert!(e.message.contains(msg), "{src}: {e}");
        assert!(!e.hint.is_empty());
    }
}

#[test]
fn templates_list_their_references() {
    let t = parse("${a|b.c|'k'} and ${d}", "env").unwrap();
    let reprs: Vec<String> = t.refs().map(|r| r.repr()).collect();
    assert_eq!(reprs, vec!["${env.a|b.c|'k'}", "${env.d}"]);
}

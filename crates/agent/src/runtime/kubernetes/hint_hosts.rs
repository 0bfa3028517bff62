//! Which hosts a Pod's hints may name. A hint's host is where the agent
//! connects with the template's credentials (the ServiceAccount token of
//! a `bearer_token_file`, a password): a Pod author may point the agent
//! at the Pod itself, never at another host, unless the operator allowed
//! that host (`hints.allowed_hosts`). Pure: text in, verdict out.

use std::net::IpAddr;

/// What `hints.allowed_hosts` holds that lets every host through.
pub const ANY_HOST: &str = "*";

/// `Ok` when `host` (as a hint gives it: `10.1.2.3:9090`,
/// `http://10.1.2.3:9090/metrics`, `[fd00::7]:80`) names the Pod's own
/// IP `pod_ip`, or a host in `allowed`; else why not, for `/status`.
pub fn check(host: &str, pod_ip: Option<&str>, allowed: &[String]) -> Result<(), String> {
    if allowed.iter().any(|a| a == ANY_HOST) {
        return Ok(());
    }
    let Some(name) = host_part(host) else {
        return Err(format!(
            "host {host:?} is not a host and port the agent can check (no userinfo, spaces or backslashes): a hint's host must be the Pod's own IP"
        ));
    };
    if pod_ip.is_some_and(|ip| same_host(name, ip)) {
        return Ok(());
    }
    if allowed.iter().any(|a| same_host(name, a)) {
        return Ok(());
    }
    Err(match pod_ip {
        Some(ip) => format!(
            "host {name:?} is not the Pod's own IP ({ip}): a hint may only point the agent at the Pod itself (an operator can allow other hosts in the kubernetes provider's `hints.allowed_hosts`)"
        ),
        None => format!(
            "host {name:?} cannot be checked against the Pod's IP, which it has none of yet: a hint may only point the agent at the Pod itself"
        ),
    })
}

/// The host of `host`: after any `scheme://`, before any path, without
/// the port or IPv6 brackets. `None` when empty, or when the authority
/// holds anything but a host and a port (userinfo, a backslash, spaces):
/// URL parsers disagree about where such a host ends.
fn host_part(host: &str) -> Option<&str> {
    let rest = host.trim();
    let rest = rest.split_once("://").map_or(rest, |(_, r)| r);
    let rest = rest.split(['/', '?', '#']).next().unwrap_or("");
    let plain =
        |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '[' | ']' | '%');
    if !rest.chars().all(plain) {
        return None;
    }
    let name = if let Some(inner) = rest.strip_prefix('[') {
        inner.split(']').next().unwrap_or("")
    } else if rest.matches(':').count() > 1 {
        // A bare IPv6 address: no port can be told apart.
        rest
    } else {
        rest.split(':').next().unwrap_or("")
    };
    (!name.is_empty()).then_some(name)
}

/// Whether two host names are the same: as IP addresses when both are
/// (`fd00::7` is `fd00:0::7`), else case-insensitively.
fn same_host(a: &str, b: &str) -> bool {
    match (a.parse::<IpAddr>(), b.parse::<IpAddr>()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a.eq_ignore_ascii_case(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: Option<&str> = Some("10.1.2.3");

    #[test]
    fn the_pods_own_ip_passes_in_every_form_a_hint_writes_it() {
        for h in [
            "10.1.2.3",
            "10.1.2.3:9090",
            "http://10.1.2.3:9090/metrics",
            " 10.1.2.3:6379 ",
        ] {
            assert_eq!(check(h, POD, &[]), Ok(()), "{h}");
        }
        assert_eq!(check("[fd00::7]:9090", Some("fd00:0::7"), &[]), Ok(()));
        assert_eq!(check("fd00::7", Some("fd00::7"), &[]), Ok(()));
    }

    #[test]
    fn any_other_host_is_refused_naming_it_and_the_way_to_allow_it() {
        for (h, name) in [
            ("other-host:80", "other-host"),
            ("http://10.1.2.30:9090", "10.1.2.30"),
            ("kubernetes.default.svc:443", "kubernetes.default.svc"),
            ("127.0.0.1:10250", "127.0.0.1"),
            ("localhost:9090", "localhost"),
            ("[::1]:80", "::1"),
        ] {
            let why = check(h, POD, &[]).expect_err(h);
            assert!(why.contains(&format!("{name:?}")), "{h}: {why}");
            assert!(why.contains("hints.allowed_hosts"), "{why}");
        }
        assert!(check("", POD, &[]).is_err());
        assert!(check("http:///metrics", POD, &[]).is_err());
        // Userinfo and backslashes: parsers disagree on where the host is.
        for h in [
            "http://10.1.2.3@evil.example:80/",
            "http://evil.example\\@10.1.2.3/",
            "http://user@10.1.2.3:8443",
        ] {
            let why = check(h, POD, &[]).expect_err(h);
            assert!(why.contains("is not a host and port"), "{h}: {why}");
        }
        let why = check("10.1.2.3:80", None, &[]).expect_err("no pod ip");
        assert!(why.contains("none of yet"), "{why}");
    }

    #[test]
    fn an_operator_allows_named_hosts_or_every_host() {
        let allowed = vec!["Metrics.Shared".to_string(), "10.9.9.9".to_string()];
        assert_eq!(check("metrics.shared:9090", POD, &allowed), Ok(()));
        assert_eq!(check("http://10.9.9.9/x", POD, &allowed), Ok(()));
        assert!(check("metrics.other:9090", POD, &allowed).is_err());
        assert_eq!(check("anything:1", None, &[ANY_HOST.to_string()]), Ok(()));
    }
}

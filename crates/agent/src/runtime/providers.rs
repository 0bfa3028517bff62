//! The static providers: `env`, `host`, `agent` and `local`. Their values
//! are read once at start (and `local` at every reload); only the election
//! providers change while the agent runs.

use leasehold_policy::{Map, Policy, Value, Vars};

/// The `host` provider: name, addresses, OS and architecture.
pub fn host() -> Value {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let mut m = Map::new();
    m.insert("name", Value::Str(name.clone()));
    m.insert("hostname", Value::Str(name));
    m.insert(
        "ip",
        Value::List(addresses().into_iter().map(Value::Str).collect()),
    );
    m.insert("os", Value::Str(std::env::consts::OS.into()));
    m.insert("platform", Value::Str(std::env::consts::OS.into()));
    m.insert("architecture", Value::Str(std::env::consts::ARCH.into()));
    m.insert("arch", Value::Str(std::env::consts::ARCH.into()));
    Value::Map(m)
}

/// The host's non-loopback IP addresses, from the kernel's interface list.
fn addresses() -> Vec<String> {
    let mut out = Vec::new();
    let mut ifaddrs: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we walk read-only and free once.
    unsafe {
        if libc::getifaddrs(&mut ifaddrs) != 0 {
            return out;
        }
        let mut cur = ifaddrs;
        while !cur.is_null() {
            let addr = (*cur).ifa_addr;
            if !addr.is_null() {
                let ip = match i32::from((*addr).sa_family) {
                    libc::AF_INET => {
                        let a = &*(addr as *const libc::sockaddr_in);
                        Some(std::net::IpAddr::from(
                            u32::from_be(a.sin_addr.s_addr).to_be_bytes(),
                        ))
                    }
                    libc::AF_INET6 => {
                        let a = &*(addr as *const libc::sockaddr_in6);
                        Some(std::net::IpAddr::from(a.sin6_addr.s6_addr))
                    }
                    _ => None,
                };
                if let Some(ip) = ip.filter(|ip| !ip.is_loopback())
                    && !out.contains(&ip.to_string())
                {
                    out.push(ip.to_string());
                }
            }
            cur = (*cur).ifa_next;
        }
        libc::freeifaddrs(ifaddrs);
    }
    out
}

/// The `agent` provider: `id`, `name` (the election identity), `version`.
pub fn agent(id: &str, name: &str) -> Value {
    let mut m = Map::new();
    m.insert("id", Value::Str(id.into()));
    m.insert("name", Value::Str(name.into()));
    m.insert("version", Value::Str(env!("CARGO_PKG_VERSION").into()));
    Value::Map(m)
}

/// The process environment as the `env` provider.
pub fn env() -> Value {
    Value::Map(std::env::vars().map(|(k, v)| (k, Value::Str(v))).collect())
}

/// The static variables for `policy`: env, host, agent and local.
pub fn static_vars(policy: &Policy, env: &Value, host: &Value, agent: &Value) -> Vars {
    let mut vars = Vars::new();
    vars.set_provider("env", env.clone());
    vars.set_provider("host", host.clone());
    vars.set_provider("agent", agent.clone());
    if let Some(local) = policy.local_vars() {
        vars.set_provider("local", local);
    }
    vars
}

/// A random id for this agent process (`agent.id`), 128 bits in hex.
pub fn random_id() -> String {
    let mut bytes = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut bytes);
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_agent_have_their_keys() {
        let Value::Map(h) = host() else { panic!() };
        for k in ["name", "ip", "os", "architecture"] {
            assert!(h.contains_key(k), "{k}");
        }
        assert!(matches!(h.get("ip"), Some(Value::List(_))));
        let Value::Map(a) = agent("i", "n") else {
            panic!()
        };
        assert_eq!(a.get("name"), Some(&Value::Str("n".into())));
        let id = random_id();
        assert_eq!(id.len(), 36);
        assert_ne!(id, random_id());
    }
}

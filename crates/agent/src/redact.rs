//! Keeping secrets out of everything the agent shows: `/status`, log
//! lines, `leasehold status --agent` and `inspect`.
//!
//! Two rules. Userinfo is cut from every URL in a message
//! (`http://user:pass@es:9200` becomes `http://es:9200`), whether or not
//! the agent knows it. And the values of secret settings (passwords, API
//! keys, tokens, `Authorization`-like headers) that a [`Redactor`] was
//! given are replaced by `[redacted]` wherever they occur: a server's
//! answer or a parser's message may quote them.

use std::borrow::Cow;
use std::fmt;

use leasehold_policy::Value;

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Secrets shorter than this are replaced only as whole words (not inside
/// a longer run of letters and digits), so that a password such as `1`
/// does not blank every digit of a message.
const SHORT: usize = 6;

/// Words that make a setting or header name secret.
const SECRET_WORDS: [&str; 11] = [
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "api_key",
    "apikey",
    "authorization",
    "credential",
    "cookie",
    "private_key",
];

/// Whether the setting or header `key` (a dotted path is judged by its
/// last part) holds a secret. Names of files and paths (`bearer_token_file`,
/// `ssl.key`) are not secrets: their contents are.
pub fn is_secret_key(key: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key);
    let last = last.to_ascii_lowercase().replace('-', "_");
    if last.ends_with("_file") || last.ends_with("_files") || last.ends_with("_path") {
        return false;
    }
    SECRET_WORDS.iter().any(|w| last.contains(w))
}

/// `text` with the userinfo (`user:pass@`) of every URL removed.
///
/// A URL's userinfo is taken to run from `://` to the last `@` before the
/// URL ends (at whitespace, a quote or an angle bracket): an unencoded `/`,
/// `?` or `@` in a password still counts as part of it.
pub fn strip_userinfo(text: &str) -> Cow<'_, str> {
    if !text.contains("://") || !text.contains('@') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let start = i + 3;
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let end = after.find(ends_url).unwrap_or(after.len());
        let url = &after[..end];
        match url.rfind('@') {
            Some(at) => out.push_str(&url[at + 1..]),
            None => out.push_str(url),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

fn ends_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>')
}

/// Splits the userinfo off a URL (or a `host:port` without scheme):
/// returns the URL without it and the user and password, percent-decoded.
/// `Err` when the userinfo does not decode to UTF-8 (the message quotes
/// nothing of it).
pub fn split_userinfo(url: &str) -> Result<(String, Option<(String, String)>), String> {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    // The last `@` before the path; an unencoded `/` in a password is
    // caught by looking at the whole rest when the authority has none.
    let at = rest[..authority_end]
        .rfind('@')
        .or_else(|| rest.rfind('@').filter(|_| !rest.contains(['?', '#'])));
    let Some(at) = at else {
        return Ok((url.to_string(), None));
    };
    let userinfo = &rest[..at];
    let (user, pass) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let user = percent_decode(user).map_err(|e| format!("the user name in the URL {e}"))?;
    let pass = percent_decode(pass).map_err(|e| format!("the password in the URL {e}"))?;
    Ok((format!("{scheme}{}", &rest[at + 1..]), Some((user, pass))))
}

/// Escapes every byte but the URL's unreserved characters as `%XX`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes; a `%` not followed by two hex digits stays.
fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| "is not UTF-8 once percent-decoded".to_string())
}

/// The secret values of a configuration, to be replaced in messages.
/// Cloning is cheap enough for the few secrets a policy has; `Debug`
/// shows how many there are, never what they are.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Redactor {
    /// Longest first, so that a secret containing another is replaced
    /// whole.
    secrets: Vec<String>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl Redactor {
    /// A redactor that knows no secret (it still strips URL userinfo).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a secret value, in the spellings a message may show it: a
    /// `Bearer x`/`Basic x`/`ApiKey x` header value also adds `x` (and a
    /// Basic credential's decoded `user:password` and password), and every
    /// value its percent-decoded and percent-encoded forms (as in a URL).
    pub fn add(&mut self, secret: &str) {
        let secret = secret.trim();
        if secret.is_empty() || secret == REDACTED {
            return;
        }
        if let Some((scheme, credential)) = secret.split_once(' ')
            && !scheme.is_empty()
            && scheme.chars().all(|c| c.is_ascii_alphanumeric())
        {
            let credential = credential.trim();
            self.insert(credential);
            if scheme.eq_ignore_ascii_case("basic") {
                use base64::Engine as _;
                if let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(credential)
                    && let Ok(raw) = String::from_utf8(raw)
                {
                    if let Some((_, password)) = raw.split_once(':') {
                        self.add_spellings(password);
                    }
                    self.insert(&raw);
                }
            }
        }
        self.add_spellings(secret);
    }

    /// `secret`, percent-decoded and percent-encoded.
    fn add_spellings(&mut self, secret: &str) {
        if let Ok(decoded) = percent_decode(secret) {
            self.insert(&percent_encode(&decoded));
            self.insert(&decoded);
        }
        self.insert(&percent_encode(secret));
        self.insert(secret);
    }

    fn insert(&mut self, secret: &str) {
        if secret.is_empty() || self.secrets.iter().any(|s| s == secret) {
            return;
        }
        let at = self
            .secrets
            .iter()
            .position(|s| s.len() < secret.len())
            .unwrap_or(self.secrets.len());
        self.secrets.insert(at, secret.to_string());
    }

    /// Adds the secrets of a configuration value found under `key`: every
    /// scalar below a secret key, and the password of every URL with
    /// userinfo.
    pub fn add_value(&mut self, key: &str, value: &Value) {
        let secret = is_secret_key(key);
        match value {
            Value::Map(m) => {
                for (k, v) in m.iter() {
                    if secret {
                        self.add_all(v);
                    } else {
                        self.add_value(k, v);
                    }
                }
            }
            Value::List(items) => {
                for v in items {
                    if secret {
                        self.add_all(v);
                    } else {
                        self.add_value(key, v);
                    }
                }
            }
            Value::Str(s) => {
                if secret {
                    self.add(s);
                } else if s.contains('@')
                    && let Ok((_, Some((_, pass)))) = split_userinfo(s)
                {
                    self.add(&pass);
                }
            }
            Value::Int(_) | Value::Float(_) if secret => self.add_scalar(value),
            _ => {}
        }
    }

    /// A number as the policy's texts and messages spell it.
    fn add_scalar(&mut self, value: &Value) {
        if let Value::Float(f) = value {
            self.add(&f.to_string());
        }
        self.add(&value.to_subst_text());
    }

    fn add_all(&mut self, value: &Value) {
        match value {
            Value::Map(m) => m.iter().for_each(|(_, v)| self.add_all(v)),
            Value::List(items) => items.iter().for_each(|v| self.add_all(v)),
            Value::Null | Value::Bool(_) => {}
            Value::Str(s) => self.add(s),
            other => self.add_scalar(other),
        }
    }

    /// Adds the values of `key: value` lines whose key is secret, read
    /// from a policy's text as it is: for a file that does not parse, whose
    /// errors may still quote a line of it.
    pub fn add_text(&mut self, text: &str) {
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let key = key.trim_matches(|c: char| c.is_whitespace() || "-{,\"'".contains(c));
            if !is_secret_key(key) {
                continue;
            }
            let value = value.trim();
            let value = value.split(" #").next().unwrap_or(value).trim();
            let value = value.trim_end_matches([',', '}']).trim();
            let value = value.trim_matches(|c| c == '"' || c == '\'');
            if !value.is_empty() && !value.starts_with(['{', '[', '|', '>']) {
                self.add(value);
            }
        }
    }

    /// Adds every secret of `other`.
    pub fn extend(&mut self, other: &Redactor) {
        for s in &other.secrets {
            self.insert(s);
        }
    }

    /// `text` without URL userinfo and with every known secret replaced
    /// by `[redacted]`.
    pub fn redact(&self, text: &str) -> String {
        let mut out = strip_userinfo(text).into_owned();
        for secret in &self.secrets {
            out = replace(&out, secret);
        }
        out
    }
}

/// `text` with `secret` replaced; a short secret only as a whole word.
fn replace(text: &str, secret: &str) -> String {
    if !text.contains(secret) {
        return text.to_string();
    }
    if secret.len() >= SHORT {
        return text.replace(secret, REDACTED);
    }
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(secret) {
        let before = rest[..i].chars().next_back().or(out.chars().next_back());
        let after = rest[i + secret.len()..].chars().next();
        out.push_str(&rest[..i]);
        if word(before) || word(after) {
            out.push_str(secret);
        } else {
            out.push_str(REDACTED);
        }
        rest = &rest[i + secret.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_cut_from_urls_in_any_spelling() {
        for (text, want) in [
            ("http://user:pass@es:9200", "http://es:9200"),
            (
                "https://user:p%40ss%2Fw@es.example:9200/prefix/_bulk: connection refused",
                "https://es.example:9200/prefix/_bulk: connection refused",
            ),
            ("HTTP://u@[::1]:9200/", "HTTP://[::1]:9200/"),
            ("http://user:p@ss/w@es:9200", "http://es:9200"),
            (
                "a \"http://a:b@x:1\", then 'https://c:d@y' and <http://e:f@z/p>",
                "a \"http://x:1\", then 'https://y' and <http://z/p>",
            ),
            (
                "http://x:1; http://u:v@y:2: refused",
                "http://x:1; http://y:2: refused",
            ),
            (
                "no url here, user@example.com",
                "no url here, user@example.com",
            ),
            ("http://es:9200 plain", "http://es:9200 plain"),
        ] {
            assert_eq!(strip_userinfo(text), want, "{text}");
        }
    }

    #[test]
    fn userinfo_is_split_off_and_percent_decoded() {
        assert_eq!(
            split_userinfo("http://el%61stic:p%40ss%3Aw0rd@es:9200/x").unwrap(),
            (
                "http://es:9200/x".to_string(),
                Some(("elastic".to_string(), "p@ss:w0rd".to_string()))
            )
        );
        assert_eq!(
            split_userinfo("user@es").unwrap(),
            ("es".to_string(), Some(("user".to_string(), String::new())))
        );
        assert_eq!(
            split_userinfo("https://es:9200").unwrap(),
            ("https://es:9200".to_string(), None)
        );
        assert_eq!(
            split_userinfo("http://u:a/b@es:9200").unwrap(),
            (
                "http://es:9200".to_string(),
                Some(("u".to_string(), "a/b".to_string()))
            )
        );
        let err = split_userinfo("http://u:%ff%fe@es").unwrap_err();
        assert!(err.contains("password") && !err.contains("%ff"), "{err}");
    }

    #[test]
    fn secrets_are_replaced_inside_longer_messages() {
        let mut r = Redactor::new();
        r.add("s3cr3t-pw");
        r.add("Bearer abc.def.ghi");
        r.add("p%40ss-word");
        let msg = "HTTP 401: {\"error\":\"bad credentials s3cr3t-pw\"} (token abc.def.ghi, p@ss-word, p%40ss-word)";
        let got = r.redact(msg);
        assert_eq!(
            got,
            "HTTP 401: {\"error\":\"bad credentials [redacted]\"} (token [redacted], [redacted], [redacted])"
        );
        assert_eq!(r.redact("https://u:s3cr3t-pw@h/x"), "https://h/x");
        assert!(!format!("{r:?}").contains("s3cr3t"));
    }

    #[test]
    fn short_secrets_are_replaced_as_whole_words_only() {
        let mut r = Redactor::new();
        r.add("12345");
        assert_eq!(
            r.redact("`outputs.es.password`: found 12345; line 123456"),
            "`outputs.es.password`: found [redacted]; line 123456"
        );
        assert_eq!(r.redact("12345"), "[redacted]");
    }

    #[test]
    fn secret_keys_and_values_are_found_in_a_configuration() {
        for key in [
            "password",
            "outputs.es.api_key",
            "Authorization",
            "X-Api-Key",
            "bearer_token",
            "client_secret",
            "ssl.key_passphrase",
        ] {
            assert!(is_secret_key(key), "{key}");
        }
        for key in ["username", "bearer_token_file", "ssl.key", "hosts", "path"] {
            assert!(!is_secret_key(key), "{key}");
        }
        let policy = leasehold_policy::Policy::parse(
            "outputs:\n  es:\n    type: elasticsearch\n    hosts: ['http://u:url-pass@es']\n    password: 12345\n    headers: {Authorization: ApiKey a2V5LXZhbHVl, X-Tenant: blue}\ninputs:\n  - id: x\n    type: exec\n    secrets: {a: [alpha-secret]}\n",
            "p.yml",
        )
        .unwrap();
        let mut r = Redactor::new();
        r.add_value("", &policy.root.to_value());
        let got = r.redact("url-pass 12345 a2V5LXZhbHVl blue alpha-secret");
        assert_eq!(got, "[redacted] [redacted] [redacted] blue [redacted]");
        let mut t = Redactor::new();
        t.add_text("outputs:\n  es:\n    password: \"12345\" # old\n    api_key: {\n  - token: tok-en-value,\n");
        assert_eq!(t.redact("12345 tok-en-value {"), "[redacted] [redacted] {");
    }
}

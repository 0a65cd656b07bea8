//! Where requests go: a node's [`Endpoint`] as the user names it, and a
//! request's [`target`], percent-encoded.

/// A node to talk to: `http://host:port` or `https://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub(super) https: bool,
    pub(super) host: String,
    pub(super) port: u16,
    /// `host:port` as a node names itself in `x-leasehold-leader-addr`, and
    /// the `host` header's value.
    pub(super) authority: String,
}

impl Endpoint {
    /// `host:port` (with `default_https` deciding the scheme) or
    /// `scheme://host[:port][/]`; `None` when it is neither.
    pub fn parse(text: &str, default_https: bool) -> Option<Endpoint> {
        let text = text.trim();
        let (https, rest) = match text.split_once("://") {
            Some(("http", rest)) => (false, rest),
            Some(("https", rest)) => (true, rest),
            Some(_) => return None,
            None => (default_https, text),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
            return None;
        }
        let default_port = if https { 443 } else { 80 };
        let (host, port) = match rest.rsplit_once(':') {
            // `[v6]:port`, `name:port`, `v4:port`
            Some((host, port)) if !host.is_empty() && (!host.contains(':') || host.ends_with(']')) => {
                (host, port.parse().ok()?)
            }
            _ if rest.starts_with('[') || !rest.contains(':') => (rest, default_port),
            _ => return None,
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if bare.is_empty() || (host.starts_with('[') && bare.parse::<std::net::Ipv6Addr>().is_err()) {
            return None;
        }
        Some(Endpoint { https, host: bare.to_owned(), port, authority: format!("{host}:{port}") })
    }

    /// `host:port`.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    fn scheme(&self) -> &'static str {
        if self.https {
            "https"
        } else {
            "http"
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme(), self.authority)
    }
}

/// A request's target: `/segment/segment?key=value`, each part
/// percent-encoded (a lock name may hold `/`, spaces or anything printable).
pub fn target(segments: &[&str], query: &[(&str, &str)]) -> String {
    let mut target = String::with_capacity(64);
    for segment in segments {
        target.push('/');
        encode_into(&mut target, segment);
    }
    if target.is_empty() {
        target.push('/');
    }
    for (i, (key, value)) in query.iter().enumerate() {
        target.push(if i == 0 { '?' } else { '&' });
        encode_into(&mut target, key);
        target.push('=');
        encode_into(&mut target, value);
    }
    target
}

/// Appends `text` with every byte but the unreserved ones (RFC 3986)
/// percent-encoded.
fn encode_into(out: &mut String, text: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 15)] as char);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures endpoints parse as the client documents them, and odd ones are refused.
    #[test]
    fn endpoints_parse() {
        let e = Endpoint::parse("127.0.0.1:7701", false).unwrap();
        assert_eq!((e.https, e.host.as_str(), e.port, e.authority()), (false, "127.0.0.1", 7701, "127.0.0.1:7701"));
        let e = Endpoint::parse("https://node1.example:8443/", false).unwrap();
        assert_eq!((e.https, e.host.as_str(), e.port), (true, "node1.example", 8443));
        let e = Endpoint::parse("node1", true).unwrap();
        assert_eq!((e.https, e.port, e.authority()), (true, 443, "node1:443"));
        let e = Endpoint::parse("http://[::1]:7701", false).unwrap();
        assert_eq!((e.host.as_str(), e.port, e.authority()), ("::1", 7701, "[::1]:7701"));
        for bad in ["", "ftp://x:1", "http://", "x:notaport", "http://x:1/path", "::1:80", "[nope]:1"] {
            assert!(Endpoint::parse(bad, false).is_none(), "{bad:?} parsed");
        }
    }

    // Ensures every part of a target is percent-encoded, so a lock name with
    // `/` or `?` stays one path segment.
    #[test]
    fn targets_encode_each_segment() {
        assert_eq!(target(&["v1", "locks", "a/b c?", "acquire"], &[]), "/v1/locks/a%2Fb%20c%3F/acquire");
        assert_eq!(target(&["v1", "locks"], &[("prefix", "x&y"), ("limit", "5")]), "/v1/locks?prefix=x%26y&limit=5");
        assert_eq!(target(&[], &[]), "/");
    }
}

//! One `egress.allow` entry, parsed: scheme, host, port and path prefix,
//! compared with a parsed URL part by part. Comparing strings let
//! `http://127.0.0.1:P@127.0.0.1:Q/` through an entry `http://127.0.0.1:P`
//! (the text starts the same; the host is the second one), so nothing here
//! looks at the URL's text.

use url::{Host, Url};

use super::error::EgressError;

/// A parsed `egress.allow` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    scheme: String,
    host: Host<String>,
    /// `None`: any port (the entry ends its host with `:*`).
    port: Option<u16>,
    /// A path prefix that ends at a segment boundary: `/api` takes `/api`
    /// and `/api/x`, never `/apix`.
    path: String,
}

impl Allowed {
    /// Parses entry `index` of `egress.allow`.
    pub fn parse(index: usize, entry: &str) -> Result<Allowed, EgressError> {
        let bad = |detail: &str| EgressError::BadEntry {
            index,
            entry: entry.to_string(),
            detail: detail.to_string(),
        };
        // `:*` after the host is ours (any port); the URL parser would
        // refuse it, so it comes off before parsing.
        let (text, any_port) = match entry.split_once("://") {
            Some((scheme, rest)) => {
                let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
                match rest[..end].strip_suffix(":*") {
                    Some(host) => (format!("{scheme}://{host}{}", &rest[end..]), true),
                    None => (entry.to_string(), false),
                }
            }
            None => {
                return Err(bad(
                    "is not a URL: write scheme, host, optional port and path, as \"https://hooks.example.com/\" or \"http://127.0.0.1:8080\"",
                ));
            }
        };
        let url = Url::parse(&text).map_err(|e| {
            bad(&format!(
                "is not a URL ({e}); write it as \"https://hooks.example.com/\""
            ))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad("must be an http:// or https:// URL"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad(
                "has a user name or password before its host; list only scheme, host, port and path",
            ));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(bad(
                "has a query or fragment; list only scheme, host, port and path",
            ));
        }
        let host = url
            .host()
            .map(|h| h.to_owned())
            .ok_or_else(|| bad("has no host"))?;
        Ok(Allowed {
            scheme: url.scheme().to_string(),
            host,
            port: if any_port {
                None
            } else {
                url.port_or_known_default()
            },
            path: url.path().to_string(),
        })
    }

    /// Whether `url` (already parsed) falls under this entry.
    pub fn admits(&self, url: &Url) -> bool {
        url.scheme() == self.scheme
            && url.host().map(|h| h.to_owned()).as_ref() == Some(&self.host)
            && self
                .port
                .is_none_or(|port| url.port_or_known_default() == Some(port))
            && under(url.path(), &self.path)
    }

    /// The entry's host when it is a name (not an IP literal): the names
    /// whose addresses the operator vouched for.
    pub fn domain(&self) -> Option<&str> {
        match &self.host {
            Host::Domain(name) => Some(name),
            _ => None,
        }
    }
}

impl std::fmt::Display for Allowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}://{}:{port}{}", self.scheme, self.host, self.path),
            None => write!(f, "{}://{}:*{}", self.scheme, self.host, self.path),
        }
    }
}

/// `path` is `prefix` or lies below it, segment by segment.
fn under(path: &str, prefix: &str) -> bool {
    if prefix.ends_with('/') {
        return path.starts_with(prefix);
    }
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admits(entry: &str, url: &str) -> bool {
        Allowed::parse(0, entry)
            .unwrap()
            .admits(&Url::parse(url).unwrap())
    }

    #[test]
    fn entries_compare_scheme_host_port_and_path_prefix() {
        for (entry, url, want) in [
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080/hook", true),
            ("http://127.0.0.1:8080", "http://127.0.0.1:9090/hook", false),
            // The bypass a string prefix let through: the host is the second one.
            (
                "http://127.0.0.1:8080",
                "http://127.0.0.1:8080@127.0.0.1:9090/",
                false,
            ),
            ("http://127.0.0.1:8080", "https://127.0.0.1:8080/", false),
            ("http://127.0.0.1", "http://127.0.0.1/x", true),
            ("http://127.0.0.1", "http://127.0.0.1:80/x", true),
            ("http://127.0.0.1", "http://127.0.0.1:81/x", false),
            ("http://127.0.0.1:*", "http://127.0.0.1:81/x", true),
            ("http://127.0.0.1:*/hooks/", "http://127.0.0.1:81/x", false),
            (
                "http://127.0.0.1:*/hooks/",
                "http://127.0.0.1:81/hooks/a",
                true,
            ),
            // Other spellings of the same address are that address.
            ("http://127.0.0.1:8080", "http://2130706433:8080/", true),
            ("https://hooks.example/", "https://HOOKS.example/a", true),
            (
                "https://hooks.example/",
                "https://hooks.example.evil/a",
                false,
            ),
            (
                "https://hooks.example/api",
                "https://hooks.example/api",
                true,
            ),
            (
                "https://hooks.example/api",
                "https://hooks.example/api/x",
                true,
            ),
            (
                "https://hooks.example/api",
                "https://hooks.example/apix",
                false,
            ),
            (
                "https://hooks.example/api/",
                "https://hooks.example/api/../admin",
                false,
            ),
            (
                "https://hooks.example/api/",
                "https://hooks.example/api/%2e%2e/admin",
                false,
            ),
            ("http://[::1]:7000/", "http://[::1]:7000/x", true),
        ] {
            assert_eq!(admits(entry, url), want, "{entry} vs {url}");
        }
    }

    #[test]
    fn entries_that_cannot_be_compared_are_refused() {
        for entry in [
            "127.0.0.1:8080",
            "ftp://files.example/",
            "http://user:pw@hooks.example/",
            "https://hooks.example/?x=1",
            "https://",
            "http://[::1/",
        ] {
            let err = Allowed::parse(3, entry).unwrap_err().to_string();
            assert!(err.starts_with("egress.allow[3]"), "{entry}: {err}");
        }
    }
}

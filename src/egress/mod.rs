//! Egress: where the daemon may connect on someone else's word. A
//! completion webhook, an A2A push config, a bundle's MCP server or remote
//! agent URL is named by a tenant or a bundle, not by the operator; this
//! module is the one rule every sender of such a request asks, and the one
//! maker of the HTTP clients they send with.
//!
//! The rule (docs/security.md, Outbound connections): http(s) only; no
//! `user:pass@` before the host; with `egress.allow` set, only URLs under
//! one of its entries, compared parsed (scheme, host, port, path prefix);
//! without it, any URL whose host is not, and does not resolve to, an
//! address of the machine or its networks (`address`). The check of an IP
//! literal happens on the parsed URL, the check of a name in the client's
//! resolver (`resolve`), which is also what the connection uses: the
//! address checked is the address connected to. The clients never follow a
//! redirect (a `Location` would be a second URL nobody checked) and never
//! go through a proxy from the environment (the proxy would resolve the
//! name instead).
//!
//! It knows no config, bundle or job: it gets the allow list as strings.

mod address;
mod allow;
mod error;
mod resolve;

use std::collections::BTreeSet;
use std::sync::Arc;

use url::{Host, Url};

pub use address::{AddressClass, class};
use allow::Allowed;
pub use error::EgressError;
use resolve::Guard;

/// The egress rule of one config: the parsed `egress.allow`.
#[derive(Debug, Clone, Default)]
pub struct Egress {
    /// `None`: any http(s) URL outside the denied ranges; `Some`: only
    /// URLs under these entries (to whatever their hosts resolve).
    allow: Option<Vec<Allowed>>,
    /// The names the entries list, whose addresses the resolver keeps.
    trusted: Arc<BTreeSet<String>>,
}

/// Where a live daemon's current rule is read (it reloads with the config).
pub trait Current: Send + Sync {
    fn egress(&self) -> Arc<Egress>;
}

impl Egress {
    /// The rule of `egress.allow` (`None`: unset).
    pub fn new(allow: Option<&[String]>) -> Result<Egress, EgressError> {
        let Some(entries) = allow else {
            return Ok(Egress::default());
        };
        let allow = entries
            .iter()
            .enumerate()
            .map(|(i, entry)| Allowed::parse(i, entry))
            .collect::<Result<Vec<_>, _>>()?;
        let trusted = allow
            .iter()
            .filter_map(Allowed::domain)
            .map(str::to_string)
            .collect();
        Ok(Egress {
            allow: Some(allow),
            trusted: Arc::new(trusted),
        })
    }

    /// A rule that admits nothing (an empty `egress.allow`).
    pub fn deny_all() -> Egress {
        Egress {
            allow: Some(Vec::new()),
            trusted: Arc::default(),
        }
    }

    /// Whether the daemon may send to `url`; the parsed URL to send to, so
    /// what was checked is what is requested. A host name is checked again
    /// when the client resolves it.
    pub fn check(&self, url: &str) -> Result<Url, EgressError> {
        let parsed = parse(url)?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(EgressError::Userinfo {
                url: url.to_string(),
            });
        }
        self.on_list(url, &parsed)?;
        if self.allow.is_some() {
            // Under an entry: the operator named this host.
            return Ok(parsed);
        }
        let literal = match parsed.host() {
            Some(Host::Ipv4(ip)) => Some((ip.into(), class(ip.into()))),
            Some(Host::Ipv6(ip)) => Some((ip.into(), class(ip.into()))),
            // RFC 6761: `localhost` and its subdomains are this machine,
            // whatever a resolver says; refused before any lookup.
            Some(Host::Domain(name)) if is_localhost(name) => Some((
                std::net::Ipv4Addr::LOCALHOST.into(),
                Some(AddressClass::Loopback),
            )),
            _ => None,
        };
        if let Some((address, Some(class))) = literal {
            return Err(EgressError::Denied {
                url: url.to_string(),
                address,
                class,
                suggest: origin(&parsed),
            });
        }
        Ok(parsed)
    }

    /// Whether `url` is within `egress.allow` alone (http(s), parsed
    /// comparison; any URL when unset), without the address rule: for a
    /// bundle's own model endpoint, whose usual home is the machine
    /// (`http://127.0.0.1:8000/v1`) and which the bundle's author, who
    /// already runs code as the daemon, chose.
    pub fn listed(&self, url: &str) -> Result<Url, EgressError> {
        let parsed = parse(url)?;
        self.on_list(url, &parsed)?;
        Ok(parsed)
    }

    /// Whether `parsed` (the URL `url`) is under an entry of the list (any
    /// URL is when the list is unset).
    fn on_list(&self, url: &str, parsed: &Url) -> Result<(), EgressError> {
        match &self.allow {
            Some(allow) if !allow.iter().any(|entry| entry.admits(parsed)) => {
                Err(EgressError::NotAllowed {
                    url: url.to_string(),
                    allowed: self.describe_allow(),
                })
            }
            _ => Ok(()),
        }
    }

    fn describe_allow(&self) -> String {
        match &self.allow {
            Some(entries) if entries.is_empty() => "which is empty".into(),
            Some(entries) => entries
                .iter()
                .map(Allowed::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            None => "unset".into(),
        }
    }

    /// The start of every HTTP client that sends to URLs this rule
    /// checked: its resolver drops denied addresses, it follows no
    /// redirect and uses no proxy. Callers add their timeouts.
    pub fn client(&self) -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Guard {
                trusted: self.trusted.clone(),
            })
    }
}

/// `url` parsed, if it is an http(s) URL.
fn parse(url: &str) -> Result<Url, EgressError> {
    let parsed = Url::parse(url).map_err(|e| EgressError::NotAUrl {
        url: url.to_string(),
        detail: e.to_string(),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(EgressError::Scheme {
            url: url.to_string(),
            scheme: parsed.scheme().to_string(),
        });
    }
    Ok(parsed)
}

fn is_localhost(name: &str) -> bool {
    let name = name.trim_end_matches('.');
    name == "localhost" || name.ends_with(".localhost")
}

/// What to add to `egress.allow` for exactly this URL's origin.
fn origin(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port_or_known_default() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    }
}

/// The egress refusal somewhere in `error`'s causes (a client's resolver
/// refused every address of the host), if that is why it failed.
pub fn refusal<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a EgressError> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(refused) = e.downcast_ref::<EgressError>() {
            return Some(refused);
        }
        next = e.source();
    }
    None
}

/// An error and its causes on one line: a refused connection's reason sits
/// deep in reqwest's chain (request → connect → resolver), where `{e}`
/// alone would only say "error sending request".
pub fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(refused) = e.downcast_ref::<EgressError>() {
            parts.push(refused.to_string());
            break;
        }
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> Egress {
        Egress::default()
    }

    #[test]
    fn without_an_allow_list_every_spelling_of_the_machine_is_refused() {
        for url in [
            "http://127.0.0.1:7860/v1/jobs",
            "http://127.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0177.0.0.1/",
            "http://0/",
            "http://0.0.0.0:5432/",
            "http://[::1]:6379/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[::]/",
            "http://10.0.0.1/steal",
            "http://192.168.1.1/",
            "http://172.16.0.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://[fe80::1]/",
            "http://[fd00::1]/",
            "http://localhost:5432/",
            "http://LOCALHOST./",
            "http://db.localhost/",
        ] {
            let err = open().check(url).unwrap_err();
            assert!(matches!(err, EgressError::Denied { .. }), "{url}: {err}");
            assert!(err.to_string().contains("egress.allow"), "{err}");
        }
        assert!(open().check("https://hooks.example.com/x").is_ok());
        assert!(open().check("http://93.184.215.14/x").is_ok());
    }

    #[test]
    fn userinfo_and_other_schemes_are_refused_even_when_allowed() {
        let allowed = Egress::new(Some(&["http://127.0.0.1:*".to_string()])).unwrap();
        for egress in [open(), allowed] {
            let err = egress.check("http://127.0.0.1:1@127.0.0.1:2/").unwrap_err();
            assert!(matches!(err, EgressError::Userinfo { .. }), "{err}");
            let err = egress.check("http://user@hooks.example/").unwrap_err();
            assert!(matches!(err, EgressError::Userinfo { .. }), "{err}");
            let err = egress.check("file:///etc/passwd").unwrap_err();
            assert!(matches!(err, EgressError::Scheme { .. }), "{err}");
            let err = egress.check("not a url").unwrap_err();
            assert!(matches!(err, EgressError::NotAUrl { .. }), "{err}");
        }
    }

    #[test]
    fn an_allow_list_admits_what_it_names_and_nothing_else() {
        let egress = Egress::new(Some(&["http://127.0.0.1:8080".to_string()])).unwrap();
        assert!(egress.check("http://127.0.0.1:8080/hook").is_ok());
        assert!(egress.check("http://127.1:8080/hook").is_ok());
        for url in [
            "http://127.0.0.1:8081/hook",
            "http://127.0.0.1/hook",
            "https://hooks.example/",
        ] {
            let err = egress.check(url).unwrap_err();
            assert!(
                matches!(err, EgressError::NotAllowed { .. }),
                "{url}: {err}"
            );
            assert!(err.to_string().contains("http://127.0.0.1:8080/"), "{err}");
        }
        let err = Egress::deny_all()
            .check("https://hooks.example/")
            .unwrap_err();
        assert!(err.to_string().contains("which is empty"), "{err}");
    }

    #[test]
    fn a_model_endpoint_is_fenced_by_the_list_only() {
        assert!(open().listed("http://127.0.0.1:8000/v1").is_ok());
        let egress = Egress::new(Some(&["https://models.example/".to_string()])).unwrap();
        assert!(egress.listed("http://127.0.0.1:8000/v1").is_err());
        assert!(egress.listed("https://models.example/v1").is_ok());
    }

    #[test]
    fn a_bad_entry_is_named_by_its_index() {
        let entries = ["https://ok.example/".to_string(), "ok.example".to_string()];
        let err = Egress::new(Some(&entries)).unwrap_err().to_string();
        assert!(err.starts_with("egress.allow[1] \"ok.example\""), "{err}");
    }

    #[tokio::test]
    async fn a_denied_connection_is_explained_by_the_resolver() {
        let client = open().client().build().unwrap();
        let err = client.get("http://localhost:9/").send().await.unwrap_err();
        let text = describe(&err);
        assert!(text.contains("loopback"), "{text}");
        assert!(
            matches!(refusal(&err), Some(EgressError::ResolvesDenied { .. })),
            "{text}"
        );
    }
}

//! The DNS resolver of every egress client: it resolves a name once and
//! hands the connector only the addresses that pass, so the connection goes
//! to an address that was checked (a name that answers a public address to
//! a check and `127.0.0.1` to the connection — DNS rebinding — cannot slip
//! between the two). Names `egress.allow` lists keep all their addresses.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::address;
use super::error::EgressError;

/// Resolves with the system resolver, then drops denied addresses.
pub struct Guard {
    /// Host names an `egress.allow` entry names (lowercase, as URLs hold them).
    pub trusted: Arc<BTreeSet<String>>,
}

impl Resolve for Guard {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_ascii_lowercase();
        let trusted = self.trusted.contains(&host);
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|e| EgressError::Resolve {
                    host: host.clone(),
                    detail: e.to_string(),
                })?
                .collect();
            let addrs = passing(&host, found, trusted)?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The addresses of `host` the daemon may connect to: all of them for a
/// trusted name, else those outside the denied ranges (an error when none).
pub fn passing(
    host: &str,
    found: Vec<SocketAddr>,
    trusted: bool,
) -> Result<Vec<SocketAddr>, EgressError> {
    if trusted {
        return Ok(found);
    }
    let (pass, denied): (Vec<SocketAddr>, Vec<SocketAddr>) = found
        .into_iter()
        .partition(|addr| address::class(addr.ip()).is_none());
    if pass.is_empty() {
        let addresses = denied
            .iter()
            .map(|a| {
                let class = address::class(a.ip()).map(|c| c.to_string());
                format!("{}: {}", a.ip(), class.unwrap_or_default())
            })
            .collect::<Vec<_>>()
            .join("; ");
        return Err(EgressError::ResolvesDenied {
            host: host.to_string(),
            addresses: if addresses.is_empty() {
                "none".into()
            } else {
                addresses
            },
        });
    }
    Ok(pass)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter()
            .map(|ip| SocketAddr::new(ip.parse().unwrap(), 0))
            .collect()
    }

    #[test]
    fn denied_addresses_are_dropped_and_a_name_with_none_left_is_refused() {
        let mixed = passing(
            "mixed.example",
            addrs(&["127.0.0.1", "93.184.215.14"]),
            false,
        );
        assert_eq!(mixed.unwrap(), addrs(&["93.184.215.14"]));
        let err = passing("rebind.example", addrs(&["127.0.0.1", "::1"]), false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("rebind.example")
                && err.contains("127.0.0.1: loopback")
                && err.contains("egress.allow"),
            "{err}"
        );
        let trusted = passing("vllm.internal", addrs(&["10.0.0.5"]), true);
        assert_eq!(trusted.unwrap(), addrs(&["10.0.0.5"]));
    }

    #[tokio::test]
    async fn localhost_resolves_to_nothing_the_guard_passes() {
        let guard = Guard {
            trusted: Arc::default(),
        };
        let name: Name = "localhost".parse().unwrap();
        let err = match guard.resolve(name).await {
            Ok(addrs) => panic!("localhost passed: {:?}", addrs.collect::<Vec<_>>()),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("localhost") && err.contains("loopback"),
            "{err}"
        );
    }
}

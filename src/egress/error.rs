//! Why the daemon will not connect somewhere: each message quotes the URL or
//! host, says which rule refused it, and what to change.

use std::net::IpAddr;

use super::address::AddressClass;

/// A refused outbound URL, or a bad `egress.allow` entry.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EgressError {
    #[error(
        "{url:?} is not a URL the daemon can connect to ({detail}); give an absolute http:// or https:// URL"
    )]
    NotAUrl { url: String, detail: String },
    #[error(
        "{url:?} uses the scheme {scheme:?}; the daemon connects only over http:// and https://"
    )]
    Scheme { url: String, scheme: String },
    #[error(
        "{url:?} has a user name or password before its host (`user:pass@`), which the daemon refuses: it hides which host is meant; send credentials in a header instead (an A2A push config's `authentication`)"
    )]
    Userinfo { url: String },
    #[error(
        "{url:?} is not in egress.allow ({allowed}); add it there (scheme, host, port and path prefix), or name an endpoint or agent of the daemon config instead"
    )]
    NotAllowed { url: String, allowed: String },
    #[error(
        "{url:?} points at {address}, {class}, which the daemon does not connect to unless egress.allow names it; if it should, add \"{suggest}\" to egress.allow"
    )]
    Denied {
        url: String,
        address: IpAddr,
        class: AddressClass,
        suggest: String,
    },
    #[error(
        "host {host:?} resolves only to addresses the daemon does not connect to ({addresses}); if it should reach this host, add its URL to egress.allow"
    )]
    ResolvesDenied { host: String, addresses: String },
    #[error("cannot resolve host {host:?}: {detail}")]
    Resolve { host: String, detail: String },
    #[error("egress.allow[{index}] {entry:?} {detail}")]
    BadEntry {
        index: usize,
        entry: String,
        detail: String,
    },
}

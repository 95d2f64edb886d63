//! Who may ask the daemon for what: API keys, their scopes, the bundles
//! they may use and their quotas, and the key ring a request's bearer token
//! is looked up in.
//!
//! A key is a name, the SHA-256 of its token (the token itself is never
//! stored), scopes, bundle globs and limits, kept in `[auth] keys_file`
//! (see [`file`]). The single `server.token_file` / `token_env` token of
//! older configs is one more key, named `token`, with every scope. With no
//! token and no keys the ring is *open*: every request is the `local`
//! key with every scope — allowed only on a loopback address
//! ([`KeyRing::check_exposure`], run by `serve`, `validate` and every
//! reload).
//!
//! What a key may do with an object — its own, another key's, of which
//! bundle — and what a running job may reach is decided in one place,
//! [`policy`]; [`grants`] states its answers for one key, action by action.
//!
//! This module knows nothing of HTTP or the queue: the API asks it who a
//! token is and what that key may do.

pub mod file;
pub mod grants;
pub mod policy;

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};

use crate::budget::DailyLimits;

/// The name of the key the single `server.token_file` token is.
pub const TOKEN_KEY: &str = "token";
/// The name of every request when the ring is open (no token, no keys).
pub const LOCAL: &str = "local";
/// Who a bundle's own schedule submits its fires as: the daemon, with
/// every scope (the operator wrote the schedule into the bundle).
pub const SCHEDULER: &str = "scheduler";

/// What a key may do. `admin` implies every other scope.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Submit jobs (every way in), continue its own conversations.
    Submit,
    /// List, read and follow its own jobs, their journals, artifacts and
    /// conversations; list bundles.
    Read,
    /// Read every key's jobs.
    ReadAll,
    /// Cancel and resolve its own jobs; reload the daemon.
    Operate,
    /// Cancel, resolve and decide on every key's jobs.
    OperateAll,
    /// Decide approvals of its own jobs (of all with `operate_all`).
    Approve,
    /// Everything.
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 7] = [
        Scope::Submit,
        Scope::Read,
        Scope::ReadAll,
        Scope::Operate,
        Scope::OperateAll,
        Scope::Approve,
        Scope::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Submit => "submit",
            Scope::Read => "read",
            Scope::ReadAll => "read_all",
            Scope::Operate => "operate",
            Scope::OperateAll => "operate_all",
            Scope::Approve => "approve",
            Scope::Admin => "admin",
        }
    }
}

impl std::str::FromStr for Scope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s.trim())
            .ok_or_else(|| {
                let known: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
                format!("unknown scope {s:?} (one of {})", known.join(", "))
            })
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One key as a request presents it: who, and what it may do.
#[derive(Debug)]
pub struct Principal {
    pub name: String,
    scopes: BTreeSet<Scope>,
    /// The bundle globs as written (for listings); `None`: every bundle.
    pub bundle_patterns: Option<Vec<String>>,
    bundles: Option<GlobSet>,
    /// Submissions a minute (every way in counts).
    pub rate_per_minute: Option<u32>,
    /// Its jobs not finished at once (queued, running, parked).
    pub max_in_flight: Option<u64>,
    /// Its own spend over a rolling day.
    pub per_day: Option<DailyLimits>,
    /// The highest `priority` its jobs may ask for.
    pub max_priority: Option<i32>,
    /// Its share of the workers against other keys with jobs waiting
    /// (1 unless the keys file says otherwise).
    pub weight: u32,
    /// Where its jobs' state changes go unless a job names its own.
    pub webhook: Option<String>,
}

impl Principal {
    /// A key with every scope and no limits (`token`, `local`).
    pub fn unrestricted(name: &str) -> Self {
        Self {
            name: name.to_string(),
            scopes: [Scope::Admin].into(),
            bundle_patterns: None,
            bundles: None,
            rate_per_minute: None,
            max_in_flight: None,
            per_day: None,
            max_priority: None,
            weight: 1,
            webhook: None,
        }
    }

    /// Whether the key has `scope` (`admin` has all; `read_all` includes
    /// `read`, `operate_all` includes `operate`).
    pub fn can(&self, scope: Scope) -> bool {
        let has = |s| self.scopes.contains(&s);
        has(Scope::Admin)
            || has(scope)
            || (scope == Scope::Read && has(Scope::ReadAll))
            || (scope == Scope::Operate && has(Scope::OperateAll))
    }

    /// Whether the key may use `bundle` (its globs; every bundle without).
    pub fn may_use(&self, bundle: &str) -> bool {
        self.bundles.as_ref().is_none_or(|set| set.is_match(bundle))
    }

    pub fn scopes(&self) -> impl Iterator<Item = Scope> + '_ {
        self.scopes.iter().copied()
    }
}

/// Why a request's token is not a key.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AuthError {
    #[error(
        "missing API key: send `Authorization: Bearer <token>` or `X-Api-Key: <token>` (an API key's token)"
    )]
    Missing,
    #[error(
        "the bearer token is not a known API key (revoked, or never issued); ask the operator for a key (`structured-agents keys new`)"
    )]
    Unknown,
}

/// Why a configuration's keys cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("{0}")]
    Token(String),
    #[error(transparent)]
    File(#[from] file::KeysFileError),
    #[error(
        "server.listen is {listen}, which is not a loopback address, and no API key or token is configured: anyone who reaches it could run jobs; set `[auth] keys_file` (structured-agents keys new NAME …) or server.token_file, or listen on 127.0.0.1"
    )]
    Exposed { listen: SocketAddr },
}

/// Every key a request may present, by the hash of its token.
#[derive(Debug, Default)]
pub struct KeyRing {
    by_hash: HashMap<String, Arc<Principal>>,
    /// Each key's name and a digest of its whole entry (never the token):
    /// what a reload's diff compares.
    fingerprints: Vec<(String, String)>,
}

impl KeyRing {
    /// The keys of `config`: `[auth] keys_file` and the single token.
    pub fn load(config: &crate::config::Config) -> Result<KeyRing, AccessError> {
        let mut ring = KeyRing::default();
        if let Some(path) = &config.auth.keys_file {
            for key in file::KeysFile::read(path)?.keys {
                let principal = key.principal().map_err(|e| file::KeysFileError::Invalid {
                    file: path.clone(),
                    key: format!("keys.{}", key.name),
                    message: e.to_string(),
                })?;
                let entry = serde_json::to_string(&key).unwrap_or_default();
                ring.insert(
                    key.token_sha256.to_ascii_lowercase(),
                    principal,
                    crate::hex::sha256_hex(entry.as_bytes()),
                );
            }
        }
        let token = config
            .read_token()
            .map_err(|e| AccessError::Token(e.to_string()))?;
        if let Some(token) = token {
            let hash = crate::hex::sha256_hex(token.as_bytes());
            let fingerprint = crate::hex::sha256_hex(hash.as_bytes());
            ring.insert(hash, Principal::unrestricted(TOKEN_KEY), fingerprint);
        }
        Ok(ring)
    }

    /// Each key's weight where it is not 1: how the queue shares its
    /// workers between keys.
    pub fn weights(&self) -> impl Iterator<Item = (String, u32)> + '_ {
        self.by_hash
            .values()
            .filter(|p| p.weight != 1)
            .map(|p| (p.name.clone(), p.weight))
    }

    fn insert(&mut self, hash: String, principal: Principal, fingerprint: String) {
        self.fingerprints
            .push((principal.name.clone(), fingerprint));
        self.by_hash.insert(hash, Arc::new(principal));
    }

    /// A ring of the given `(token, principal)` pairs (tests).
    pub fn of(keys: Vec<(&str, Principal)>) -> KeyRing {
        let mut ring = KeyRing::default();
        for (token, principal) in keys {
            let hash = crate::hex::sha256_hex(token.as_bytes());
            ring.insert(hash.clone(), principal, hash);
        }
        ring
    }

    /// The key named `name` (an open ring's `local` too): who a schedule's
    /// fires are submitted as.
    pub fn by_name(&self, name: &str) -> Option<Arc<Principal>> {
        if self.is_open() {
            return (name == LOCAL).then(|| Arc::new(Principal::unrestricted(LOCAL)));
        }
        self.by_hash.values().find(|p| p.name == name).cloned()
    }

    /// The bundles a job owned by `owner` may reach indirectly (see
    /// [`policy::Reach`]): the key's as the ring has it now; everything for
    /// the daemon's own jobs (a bundle's schedule, jobs from before keys)
    /// and on an open ring.
    pub fn reach_of(&self, owner: Option<&str>) -> policy::Reach {
        match owner {
            None | Some(SCHEDULER) => policy::Reach::Everything,
            Some(name) if self.is_open() => match name {
                LOCAL => policy::Reach::Everything,
                other => policy::Reach::Revoked(other.to_string()),
            },
            Some(name) => match self.by_name(name) {
                Some(key) => policy::Reach::Key(key),
                None => policy::Reach::Revoked(name.to_string()),
            },
        }
    }

    /// Whether no key is configured: every request is `local`.
    pub fn is_open(&self) -> bool {
        self.by_hash.is_empty()
    }

    /// Each key's name and a digest of its entry, in the order configured
    /// (never a token).
    pub fn fingerprints(&self) -> &[(String, String)] {
        &self.fingerprints
    }

    /// Who presents `bearer`. An open ring answers everyone as
    /// `local`. The lookup is by the token's SHA-256, so nothing is
    /// compared byte by byte against a secret.
    pub fn authenticate(&self, bearer: Option<&str>) -> Result<Arc<Principal>, AuthError> {
        if self.is_open() {
            return Ok(Arc::new(Principal::unrestricted(LOCAL)));
        }
        let token = bearer.filter(|t| !t.is_empty()).ok_or(AuthError::Missing)?;
        self.by_hash
            .get(&crate::hex::sha256_hex(token.as_bytes()))
            .cloned()
            .ok_or(AuthError::Unknown)
    }

    /// Refuses an open ring on an address others can reach. `serve`,
    /// `validate` and every reload run it, so no edit can take the last key
    /// off a daemon that listens on the network.
    pub fn check_exposure(&self, listen: SocketAddr) -> Result<(), AccessError> {
        if self.is_open() && !listen.ip().is_loopback() {
            return Err(AccessError::Exposed { listen });
        }
        Ok(())
    }
}

/// The bundle globs of a key, compiled; a bad glob is named.
fn compile_globs(patterns: &[String]) -> Result<GlobSet, file::KeyError> {
    let mut builder = GlobSetBuilder::new();
    for pattern in patterns {
        let glob = Glob::new(pattern).map_err(|source| file::KeyError::Glob {
            pattern: pattern.clone(),
            source,
        })?;
        builder.add(glob);
    }
    builder.build().map_err(file::KeyError::Globs)
}

#[cfg(test)]
mod tests {
    use super::file::test_key as key;
    use super::*;

    #[test]
    fn an_open_ring_is_local_with_every_scope_and_refused_off_loopback() {
        let ring = KeyRing::default();
        let who = ring.authenticate(None).unwrap();
        assert_eq!(who.name, LOCAL);
        assert_eq!(
            LOCAL, "local",
            "decisions were recorded as `local` before keys"
        );
        assert!(Scope::ALL.iter().all(|s| who.can(*s)));
        assert!(
            ring.check_exposure("127.0.0.1:7860".parse().unwrap())
                .is_ok()
        );
        let err = ring
            .check_exposure("0.0.0.0:7860".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("0.0.0.0:7860") && err.contains("keys_file"),
            "{err}"
        );
    }

    #[test]
    fn tokens_are_looked_up_by_hash_and_unknown_ones_refused() {
        let ring = KeyRing::of(vec![
            ("secret-a", key("a", &[Scope::Submit], None)),
            ("secret-b", key("b", &[Scope::ReadAll], None)),
        ]);
        assert_eq!(ring.authenticate(Some("secret-a")).unwrap().name, "a");
        assert_eq!(ring.authenticate(None).unwrap_err(), AuthError::Missing);
        assert_eq!(
            ring.authenticate(Some("secret-c")).unwrap_err(),
            AuthError::Unknown
        );
        assert!(ring.check_exposure("0.0.0.0:1".parse().unwrap()).is_ok());
    }

    #[test]
    fn scopes_imply_their_narrower_ones_and_bundles_follow_globs() {
        let a = key(
            "a",
            &[Scope::Submit, Scope::Read],
            Some(&["refunds", "support-*"]),
        );
        assert!(a.can(Scope::Read) && !a.can(Scope::ReadAll) && !a.can(Scope::Approve));
        assert!(a.may_use("refunds") && a.may_use("support-mail") && !a.may_use("payments"));
        let b = key("b", &[Scope::ReadAll, Scope::OperateAll], None);
        assert!(b.can(Scope::Read) && b.can(Scope::Operate) && b.can(Scope::ReadAll));
        assert!(b.may_use("anything"));
        let admin = key("c", &[Scope::Admin], None);
        assert!(Scope::ALL.iter().all(|s| admin.can(*s)));
    }
}

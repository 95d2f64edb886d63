//! The keys file (`[auth] keys_file`): one `[[keys]]` table per API key.
//! `structured-agents keys new/list/revoke` manage it; an operator may
//! edit it too, and a reload (or the file watcher's next reload) applies it
//! live. Tokens are stored only as their SHA-256.
//!
//! ```toml
//! [[keys]]
//! name = "support"
//! token_sha256 = "9f86d0…"
//! scopes = ["submit", "read", "approve"]
//! bundles = ["refunds", "support-*"]
//! rate_per_minute = 120
//! max_in_flight = 20
//! max_priority = 10
//! weight = 3
//! per_day = { tokens = 2000000, cost = 25.0 }
//! ```

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{LOCAL, Principal, SCHEDULER, Scope, TOKEN_KEY, compile_globs};
use crate::budget::DailyLimits;

/// Why the keys file cannot be read, parsed or written.
#[derive(Debug, thiserror::Error)]
pub enum KeysFileError {
    #[error("{}: cannot read the keys file: {source}; create it with `structured-agents keys new NAME` or fix `[auth] keys_file`", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", file.display())]
    Parse { file: PathBuf, message: String },
    #[error("{}: {key}: {message}", file.display())]
    Invalid {
        file: PathBuf,
        key: String,
        message: String,
    },
    #[error("{}: cannot write the keys file: {source}", file.display())]
    Write {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{}: a key named {name:?} exists; revoke it first (`structured-agents keys revoke {name}`, `DELETE /v1/keys/{name}`) or pick another name",
        file.display()
    )]
    Exists { file: PathBuf, name: String },
    #[error("{}: no key named {name:?} (keys: {known})", file.display())]
    NoSuchKey {
        file: PathBuf,
        name: String,
        known: String,
    },
}

/// The file as stored.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeysFile {
    #[serde(default)]
    pub keys: Vec<KeyEntry>,
}

/// One key as stored.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// Shown in job owners, decisions, logs and metrics.
    pub name: String,
    /// The SHA-256 of the token, in hex.
    pub token_sha256: String,
    pub scopes: Vec<Scope>,
    /// Globs of the bundle names it may use; every bundle when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundles: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_minute: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_day: Option<DailyLimits>,
    /// Its share of the workers while other keys' jobs wait too, against
    /// weight 1 for every key without one (docs/daemon.md, Fair shares).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// RFC 3339, when `keys new` made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Where its jobs' state changes are POSTed unless a job names its own
    /// (docs/api.md, Completion webhooks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
}

/// A key to make (`structured-agents keys new`, `POST /v1/keys`): what
/// the file stores of it but its token's hash and when it was made.
#[derive(Debug, Default, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// Shown in job owners, decisions, logs and metrics ([`check_name`]).
    #[schemars(schema_with = "key_name")]
    pub name: String,
    #[schemars(length(min = 1))]
    pub scopes: Vec<Scope>,
    /// Globs of the bundle names it may use; every bundle when unset.
    #[serde(default)]
    pub bundles: Option<Vec<String>>,
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub rate_per_minute: Option<u32>,
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_in_flight: Option<u64>,
    #[serde(default)]
    pub max_priority: Option<i32>,
    #[serde(default, deserialize_with = "crate::budget::object_only")]
    pub per_day: Option<DailyLimits>,
    /// Its share of the workers while other keys' jobs wait too (1 to 1000).
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_WEIGHT))]
    pub weight: Option<u32>,
    /// Where its jobs' state changes are POSTed unless a job names its own.
    #[serde(default)]
    #[schemars(regex(pattern = WEBHOOK_PATTERN))]
    pub webhook: Option<String>,
}

/// [`check_name`]'s characters and length (its reserved names are the
/// schema's `not`).
const KEY_NAME_PATTERN: &str = "^[A-Za-z0-9_.-]{1,64}$";

/// A key's name in the API document, as [`check_name`] takes it.
fn key_name(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Shown in job owners, decisions, logs and metrics",
        "type": "string",
        "pattern": KEY_NAME_PATTERN,
        "not": {"enum": [TOKEN_KEY, LOCAL, SCHEDULER]}
    })
}

impl NewKey {
    /// The entry the file stores, with the SHA-256 of `token`, made now.
    fn entry(self, token: &str) -> KeyEntry {
        KeyEntry {
            name: self.name,
            token_sha256: crate::hex::sha256_hex(token.as_bytes()),
            scopes: self.scopes,
            bundles: self.bundles,
            rate_per_minute: self.rate_per_minute,
            max_in_flight: self.max_in_flight,
            max_priority: self.max_priority,
            weight: self.weight,
            per_day: self.per_day,
            created_at: Some(
                humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            ),
            webhook: self.webhook,
        }
    }
}

/// A key just added to the file, with its token: shown once, never stored.
#[derive(Debug)]
pub struct Issued {
    pub entry: KeyEntry,
    pub token: String,
}

/// Why one key of the keys file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("name {0:?}: use 1 to 64 letters, digits, `_`, `.` or `-`")]
    BadName(String),
    #[error(
        "name {0:?} is reserved (the single token is `{TOKEN_KEY}`, requests without keys `{LOCAL}`, a bundle's schedule `{SCHEDULER}`)"
    )]
    ReservedName(String),
    #[error(
        "scopes: a key needs at least one scope (submit, read, read_all, operate, operate_all, approve, admin)"
    )]
    NoScopes,
    #[error(
        "rate_per_minute and max_in_flight must be at least 1 (remove the key to take its access away)"
    )]
    ZeroLimit,
    #[error("weight must be 1 to {MAX_WEIGHT} (its share of the workers against weight 1)")]
    Weight,
    #[error("webhook: {0}")]
    Webhook(#[from] NotHttpUrl),
    #[error("bundles: {pattern:?} is not a glob ({source})")]
    Glob {
        pattern: String,
        source: globset::Error,
    },
    #[error("bundles: the globs do not compile together ({0})")]
    Globs(globset::Error),
}

/// A webhook that is no http(s) URL.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not an http(s) URL")]
pub struct NotHttpUrl(pub String);

impl KeyEntry {
    /// The key as requests present it, or why it is unusable.
    pub fn principal(&self) -> Result<Principal, KeyError> {
        check_name(&self.name)?;
        if self.scopes.is_empty() {
            return Err(KeyError::NoScopes);
        }
        if self.rate_per_minute == Some(0) || self.max_in_flight == Some(0) {
            return Err(KeyError::ZeroLimit);
        }
        if self.weight.is_some_and(|w| !(1..=MAX_WEIGHT).contains(&w)) {
            return Err(KeyError::Weight);
        }
        if let Some(url) = &self.webhook {
            check_webhook(url)?;
        }
        let bundles = self.bundles.as_deref().map(compile_globs).transpose()?;
        Ok(Principal {
            name: self.name.clone(),
            scopes: self.scopes.iter().copied().collect(),
            bundle_patterns: self.bundles.clone(),
            bundles,
            rate_per_minute: self.rate_per_minute,
            max_in_flight: self.max_in_flight,
            per_day: self.per_day.clone(),
            max_priority: self.max_priority,
            weight: self.weight.unwrap_or(1),
            webhook: self.webhook.clone(),
        })
    }
}

/// The largest `weight` a key may have: a thousand times a default key's
/// share.
pub const MAX_WEIGHT: u32 = 1000;

/// [`check_webhook`]'s rule as the API document states it (for a key's and
/// a job's `webhook`).
pub const WEBHOOK_PATTERN: &str = "^https?://[^\\u0000]*$";

/// Whether `url` can be a completion webhook's target: an http(s) URL
/// (whether `egress.allow` admits it is checked where a job is admitted).
pub fn check_webhook(url: &str) -> Result<(), NotHttpUrl> {
    if !(url.starts_with("http://") || url.starts_with("https://")) || url.contains('\0') {
        return Err(NotHttpUrl(url.to_string()));
    }
    Ok(())
}

/// A key name: 1 to 64 of `A-Z a-z 0-9 _ . -`, not a reserved name. It
/// prefixes its jobs' idempotency keys (`name/key`), so never a `/`.
pub fn check_name(name: &str) -> Result<(), KeyError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if !valid {
        return Err(KeyError::BadName(name.to_string()));
    }
    if name == TOKEN_KEY || name == LOCAL || name == SCHEDULER {
        return Err(KeyError::ReservedName(name.to_string()));
    }
    Ok(())
}

impl KeysFile {
    /// Reads and checks the file: names unique, hashes unique and well
    /// formed, every key usable.
    pub fn read(path: &Path) -> Result<KeysFile, KeysFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeysFileError::Read {
            file: path.to_path_buf(),
            source,
        })?;
        let file: KeysFile = toml::from_str(&text).map_err(|e| KeysFileError::Parse {
            file: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let invalid = |i: usize, message: String| KeysFileError::Invalid {
            file: path.to_path_buf(),
            key: format!("keys[{i}]"),
            message,
        };
        let mut names = std::collections::HashSet::new();
        let mut hashes = std::collections::HashSet::new();
        for (i, key) in file.keys.iter().enumerate() {
            key.principal().map_err(|e| invalid(i, e.to_string()))?;
            let hash = key.token_sha256.to_ascii_lowercase();
            if hash.len() != 64 || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(invalid(
                    i,
                    "token_sha256: not a SHA-256 in hex (64 characters); `structured-agents keys new` writes it".into(),
                ));
            }
            if !names.insert(key.name.clone()) {
                return Err(invalid(i, format!("name {:?} is used twice", key.name)));
            }
            if !hashes.insert(hash) {
                return Err(invalid(i, "token_sha256: two keys share one token".into()));
            }
        }
        Ok(file)
    }

    /// The file at `path`, or an empty one when it does not exist yet.
    pub fn read_or_empty(path: &Path) -> Result<KeysFile, KeysFileError> {
        if path.exists() {
            Self::read(path)
        } else {
            Ok(KeysFile::default())
        }
    }

    /// Writes the file whole, owner-only (0600), by a rename so a reload
    /// never reads half of it.
    pub fn write(&self, path: &Path) -> Result<(), KeysFileError> {
        let failed = |source| KeysFileError::Write {
            file: path.to_path_buf(),
            source,
        };
        let text = toml::to_string_pretty(self)
            .map_err(|e| failed(std::io::Error::other(e.to_string())))?;
        let text = format!(
            "# API keys of structured-agents ([auth] keys_file). Managed by\n# `structured-agents keys new/list/revoke`; tokens are stored only as SHA-256.\n\n{text}"
        );
        let mut temp_name = path.as_os_str().to_owned();
        temp_name.push(".tmp");
        let temp = PathBuf::from(temp_name);
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)
            .map_err(failed)?;
        // `mode` applies only to a new file; an old temp file is tightened.
        out.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(failed)?;
        out.write_all(text.as_bytes()).map_err(failed)?;
        out.sync_all().map_err(failed)?;
        std::fs::rename(&temp, path).map_err(failed)?;
        Ok(())
    }
}

impl KeysFile {
    /// Adds `key` with a fresh token to the file at `path` (made when
    /// missing): the one way a key is made, for the CLI and the API alike.
    /// A name in use or an unusable key is refused, the file untouched.
    pub fn add(path: &Path, key: NewKey) -> Result<Issued, KeysFileError> {
        let mut file = KeysFile::read_or_empty(path)?;
        if file.keys.iter().any(|k| k.name == key.name) {
            return Err(KeysFileError::Exists {
                file: path.to_path_buf(),
                name: key.name,
            });
        }
        let token = new_token();
        let entry = key.entry(&token);
        entry.principal().map_err(|e| KeysFileError::Invalid {
            file: path.to_path_buf(),
            key: format!("keys.{}", entry.name),
            message: e.to_string(),
        })?;
        file.keys.push(entry.clone());
        file.write(path)?;
        Ok(Issued { entry, token })
    }

    /// Removes the key named `name` from the file at `path`: the one way a
    /// key is revoked. Answers the key as it was.
    pub fn revoke(path: &Path, name: &str) -> Result<KeyEntry, KeysFileError> {
        let mut file = KeysFile::read(path)?;
        let Some(at) = file.keys.iter().position(|k| k.name == name) else {
            let known: Vec<&str> = file.keys.iter().map(|k| k.name.as_str()).collect();
            return Err(KeysFileError::NoSuchKey {
                file: path.to_path_buf(),
                name: name.to_string(),
                known: known.join(", "),
            });
        };
        let revoked = file.keys.remove(at);
        file.write(path)?;
        Ok(revoked)
    }
}

/// A fresh token: `sa_` and 32 random bytes in hex.
pub fn new_token() -> String {
    format!("sa_{}", crate::hex::hex(&rand::random::<[u8; 32]>()))
}

/// A key named `name` with `scopes` and, when given, only `bundles`, as
/// the tests of `access` build their principals.
#[cfg(test)]
pub(super) fn test_key(name: &str, scopes: &[Scope], bundles: Option<&[&str]>) -> Principal {
    KeyEntry {
        name: name.into(),
        scopes: scopes.to_vec(),
        bundles: bundles.map(|b| b.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
    .principal()
    .expect("a test key is valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_patterns_say_what_the_checks_take() {
        let name = regex::Regex::new(KEY_NAME_PATTERN).unwrap();
        for text in [
            "ops",
            "a.b_c-1",
            "",
            "a b",
            "a/b",
            "é",
            &"k".repeat(64),
            &"k".repeat(65),
        ] {
            let reserved = [TOKEN_KEY, LOCAL, SCHEDULER].contains(&text);
            assert_eq!(
                name.is_match(text) && !reserved,
                check_name(text).is_ok(),
                "{text:?}"
            );
        }
        let webhook = regex::Regex::new(WEBHOOK_PATTERN).unwrap();
        for url in [
            "http://h/x",
            "https://h",
            "ftp://h",
            "http:/h",
            "http://a\0b",
            "",
        ] {
            assert_eq!(webhook.is_match(url), check_webhook(url).is_ok(), "{url:?}");
        }
    }

    #[test]
    fn a_weight_is_one_to_a_thousand() {
        let key = |weight| KeyEntry {
            name: "team".into(),
            scopes: vec![Scope::Submit],
            weight,
            ..Default::default()
        };
        assert_eq!(key(None).principal().unwrap().weight, 1);
        assert_eq!(key(Some(1000)).principal().unwrap().weight, 1000);
        for bad in [0, 1001] {
            let error = key(Some(bad)).principal().unwrap_err().to_string();
            assert!(error.contains("weight must be 1 to 1000"), "{error}");
        }
    }

    #[test]
    fn a_written_file_reads_back_and_bad_entries_are_located() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        let token = new_token();
        let file = KeysFile {
            keys: vec![KeyEntry {
                name: "team-a".into(),
                token_sha256: crate::hex::sha256_hex(token.as_bytes()),
                scopes: vec![Scope::Submit, Scope::Read],
                bundles: Some(vec!["refunds*".into()]),
                ..Default::default()
            }],
        };
        file.write(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&token), "the token itself is never stored");
        assert_eq!(KeysFile::read(&path).unwrap().keys[0].name, "team-a");

        std::fs::write(
            &path,
            "[[keys]]\nname = \"a\"\ntoken_sha256 = \"00\"\nscopes = [\"read\"]\n",
        )
        .unwrap();
        let err = KeysFile::read(&path).unwrap_err().to_string();
        assert!(
            err.contains("keys[0]") && err.contains("token_sha256"),
            "{err}"
        );
        std::fs::write(&path, "[[keys]]\nname = \"a\"\nscopes = [\"fly\"]\n").unwrap();
        let err = KeysFile::read(&path).unwrap_err().to_string();
        assert!(err.contains("keys.toml") && err.contains("line"), "{err}");
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("team-a.prod_1").is_ok());
        for bad in ["", "a/b", "token", "local", "a b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}

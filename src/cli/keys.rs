//! `structured-agents keys new/list/revoke`: the API keys file named by
//! `[auth] keys_file`. `new` prints the token once (only its SHA-256 is
//! stored); a running daemon applies the change at its next reload
//! (`structured-agents reload`, or `systemctl reload`). Keys are made and
//! revoked by `access::file` (`KeysFile::add`, `revoke`), which
//! `/v1/keys` calls too.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::access::Scope;
use crate::access::file::{KeysFile, NewKey};
use crate::budget::DailyLimits;

#[derive(Debug, clap::Args)]
pub struct KeysArgs {
    /// The daemon's config file, whose `[auth] keys_file` is managed.
    #[arg(long, short, env = "STRUCTURED_AGENTS_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// The keys file itself (instead of the config's `[auth] keys_file`).
    #[arg(long, global = true)]
    file: Option<PathBuf>,
    #[command(subcommand)]
    command: KeysCommand,
}

#[derive(Debug, clap::Subcommand)]
enum KeysCommand {
    /// Make a key, add it to the file and print its token (once).
    New(NewKeyArgs),
    /// List the keys (never their tokens).
    List,
    /// Remove a key: requests with its token are refused after the next reload.
    Revoke { name: String },
}

// `keys new`'s arguments: the key's fields as the file stores them (no
// doc comment: the variant's is the subcommand's help).
#[derive(Debug, clap::Args)]
struct NewKeyArgs {
    /// Its name: in job owners, decisions, logs.
    name: String,
    /// What it may do: submit, read, read_all, operate, operate_all,
    /// approve, admin (comma-separated).
    #[arg(long, value_delimiter = ',', required = true)]
    scopes: Vec<Scope>,
    /// Globs of the bundles it may use (comma-separated); all when left out.
    #[arg(long, value_delimiter = ',')]
    bundles: Option<Vec<String>>,
    /// Submissions a minute.
    #[arg(long)]
    rate_per_minute: Option<u32>,
    /// Its jobs not finished at once.
    #[arg(long)]
    max_in_flight: Option<u64>,
    /// The highest priority its jobs may ask for.
    #[arg(long)]
    max_priority: Option<i32>,
    /// Its share of the workers while other keys' jobs wait too (1 to
    /// 1000, against 1 for keys without one).
    #[arg(long)]
    weight: Option<u32>,
    /// Its tokens over a rolling day.
    #[arg(long)]
    tokens_per_day: Option<u64>,
    /// Its cost over a rolling day (the daemon's `[prices]`).
    #[arg(long)]
    cost_per_day: Option<f64>,
    /// Where its jobs' state changes are POSTed when a job names no
    /// webhook of its own (an http(s) URL within the daemon's
    /// `egress.allow`; docs/api.md, Completion webhooks).
    #[arg(long)]
    webhook: Option<String>,
}

pub fn keys(args: KeysArgs) -> anyhow::Result<i32> {
    let path = keys_file(args.config.as_deref(), args.file)?;
    match args.command {
        KeysCommand::New(key) => new_key(&path, key),
        KeysCommand::List => list(&path),
        KeysCommand::Revoke { name } => revoke(&path, &name),
    }
}

impl From<NewKeyArgs> for NewKey {
    fn from(args: NewKeyArgs) -> Self {
        let per_day =
            (args.tokens_per_day.is_some() || args.cost_per_day.is_some()).then_some(DailyLimits {
                tokens: args.tokens_per_day,
                cost: args.cost_per_day,
            });
        NewKey {
            name: args.name,
            scopes: args.scopes,
            bundles: args.bundles,
            rate_per_minute: args.rate_per_minute,
            max_in_flight: args.max_in_flight,
            max_priority: args.max_priority,
            per_day,
            weight: args.weight,
            webhook: args.webhook,
        }
    }
}

/// `keys new`: the key joins the file (`KeysFile::add`, as
/// `POST /v1/keys` does); its token is printed, once.
fn new_key(path: &Path, key: NewKeyArgs) -> anyhow::Result<i32> {
    let issued = KeysFile::add(path, key.into())?;
    eprintln!(
        "added key {:?} to {}; a running daemon takes it at its next reload (`structured-agents reload`). The token, shown only now:",
        issued.entry.name,
        path.display()
    );
    println!("{}", issued.token);
    Ok(0)
}

/// `keys list`: each key's name, scopes, bundles and limits, one a line.
fn list(path: &Path) -> anyhow::Result<i32> {
    let file = KeysFile::read_or_empty(path)?;
    if file.keys.is_empty() {
        eprintln!("no keys in {}", path.display());
    }
    for key in &file.keys {
        let scopes: Vec<&str> = key.scopes.iter().map(|s| s.as_str()).collect();
        println!(
            "{:<20} scopes {:<30} bundles {}{}{}{}{}",
            key.name,
            scopes.join(","),
            key.bundles.as_deref().map_or("*".into(), |b| b.join(",")),
            key.rate_per_minute
                .map_or(String::new(), |r| format!("  {r}/min")),
            key.max_in_flight
                .map_or(String::new(), |n| format!("  ≤{n} in flight")),
            key.weight
                .map_or(String::new(), |w| format!("  weight {w}")),
            key.webhook
                .as_deref()
                .map_or(String::new(), |w| format!("  webhook {w}")),
        );
    }
    Ok(0)
}

/// `keys revoke NAME`: the key leaves the file (`KeysFile::revoke`, as
/// `DELETE /v1/keys/{name}` does); a daemon refuses its token after its
/// next reload.
fn revoke(path: &Path, name: &str) -> anyhow::Result<i32> {
    KeysFile::revoke(path, name)?;
    eprintln!(
        "revoked key {name:?} in {}; a running daemon refuses its token after its next reload (`structured-agents reload`)",
        path.display()
    );
    Ok(0)
}

/// `--file`, or the config's `[auth] keys_file`.
fn keys_file(config: Option<&Path>, file: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(file) = file {
        return Ok(file);
    }
    let config = crate::config::Config::load(config).context("reading the config")?;
    config.auth.keys_file.ok_or_else(|| {
        anyhow::anyhow!(
            "the config sets no `[auth] keys_file`: add `[auth]\\nkeys_file = \"keys.toml\"` to it, or give --file"
        )
    })
}

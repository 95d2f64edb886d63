//! `structured-agents eval BUNDLE --dir PATH`: the suite of a bundle
//! directory that is not dropped anywhere yet (a pull request of it, say),
//! run in a daemon of the command's own. The command starts one in this
//! process on a private temporary directory — its own state and SQLite
//! queue, loopback on a free port, no keys — with a copy of PATH as the
//! bundle BUNDLE and copies of the `--with` directories beside it (a judge
//! bundle, the bundles it runs nested), the endpoints and model configs of
//! `--config`. The eval then runs as against any daemon, through the same
//! jobs, graders and report; the daemon drains and its directory is
//! removed when the command ends. Nothing of an operator's queue, state or
//! bundles is read or written.

use std::net::SocketAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::sync::oneshot;

use super::client::ServerArgs;
use crate::config::{Config, QueueBackend};
use crate::daemon::{Daemon, ServeError};

/// How long the daemon may take to load its bundles and listen.
const START_WITHIN: Duration = Duration::from_secs(120);
/// How often its control file is looked for while it starts.
const START_POLL: Duration = Duration::from_millis(50);

/// What the own daemon serves and with which config.
pub(super) struct OwnBundles<'a> {
    /// The bundle's name, which `dir`'s copy is served under.
    pub bundle: &'a str,
    pub dir: &'a Path,
    /// Other bundle directories, each under its directory's name.
    pub with: &'a [PathBuf],
    /// The config file lending endpoints, models and prices.
    pub config: Option<&'a Path>,
}

/// Runs `eval` against a daemon of the command's own serving `own`, then
/// drains the daemon and removes its directory: `eval`'s exit code.
pub(super) async fn with_own_daemon<Fut>(
    own: OwnBundles<'_>,
    eval: impl FnOnce(ServerArgs) -> Fut,
) -> anyhow::Result<i32>
where
    Fut: Future<Output = anyhow::Result<i32>>,
{
    if !crate::bundle::is_valid_name(own.bundle) {
        bail!(
            "{:?} is not a bundle name (letters, digits, `-` and `_`)",
            own.bundle
        );
    }
    let mut config = Config::load(own.config).context("--config")?;
    let root = private_dir()?;
    let result = match lay_out(&root, &own) {
        Ok(bundles) => {
            own_settings(&mut config, &root, bundles);
            serve_for(config, eval).await
        }
        Err(e) => Err(e),
    };
    remove(&root);
    result
}

/// Builds and runs the daemon of `config` while `eval` runs against it.
async fn serve_for<Fut>(config: Config, eval: impl FnOnce(ServerArgs) -> Fut) -> anyhow::Result<i32>
where
    Fut: Future<Output = anyhow::Result<i32>>,
{
    let state_dir = config.paths.state_dir.clone();
    let daemon = Daemon::build(config, None, None, false)
        .await
        .context("starting the eval's own daemon")?
        .embedded();
    let (stop, stopped) = oneshot::channel::<()>();
    // Driven here beside the eval rather than spawned: it needs no task
    // of its own, and it ends with the command.
    let run = daemon.run(async {
        let _ = stopped.await;
    });
    tokio::pin!(run);
    let address = tokio::select! {
        served = &mut run => bail!("the eval's own daemon stopped before it listened: {}", ended(served)),
        address = listening(&state_dir) => address?,
    };
    let eval = eval(ServerArgs {
        server: format!("http://{address}"),
        token: None,
    });
    tokio::pin!(eval);
    let result = tokio::select! {
        served = &mut run => bail!("the eval's own daemon stopped during the eval: {}", ended(served)),
        result = &mut eval => result,
    };
    let _ = stop.send(());
    if let Err(e) = run.await {
        tracing::warn!(error = %e, "the eval's own daemon stopped with an error");
    }
    result
}

/// Why a daemon's run ended, for an error.
fn ended(served: Result<(), ServeError>) -> String {
    match served {
        Ok(()) => "it was stopped".into(),
        Err(e) => e.to_string(),
    }
}

/// The daemon's address once it listens (its control file is written).
async fn listening(state_dir: &Path) -> anyhow::Result<SocketAddr> {
    let started = Instant::now();
    loop {
        let dir = state_dir.to_path_buf();
        let control = tokio::task::spawn_blocking(move || crate::control::Control::read(&dir))
            .await
            .ok()
            .flatten();
        if let Some(control) = control {
            return Ok(control.address);
        }
        if started.elapsed() > START_WITHIN {
            bail!(
                "the eval's own daemon did not listen within {}s (see its log above)",
                START_WITHIN.as_secs()
            );
        }
        tokio::time::sleep(START_POLL).await;
    }
}

/// A new directory only this user may enter, under the system's temporary
/// directory.
fn private_dir() -> anyhow::Result<PathBuf> {
    let suffix: [u8; 8] = rand::random();
    let root = std::env::temp_dir().join(format!(
        "structured-agents-eval-{}-{}",
        std::process::id(),
        crate::hex::hex(&suffix)
    ));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&root)
        .with_context(|| format!("cannot make the eval's directory {}", root.display()))?;
    Ok(root)
}

/// Copies the bundles into `root/bundles/`: `own.dir` as `own.bundle`,
/// each of `own.with` under its directory's name. The bundles directory.
fn lay_out(root: &Path, own: &OwnBundles<'_>) -> anyhow::Result<PathBuf> {
    let bundles = root.join("bundles");
    let mut copies = vec![(own.dir.to_path_buf(), own.bundle.to_string())];
    for other in own.with {
        let name = other
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .with_context(|| format!("--with {}: not a directory name", other.display()))?;
        if copies.iter().any(|(_, taken)| *taken == name) {
            bail!(
                "--with {}: a bundle named {name:?} is there already",
                other.display()
            );
        }
        copies.push((other.clone(), name));
    }
    for (from, name) in copies {
        crate::bundle::copy_dir(&from, &bundles.join(&name))
            .with_context(|| format!("copying bundle directory {}", from.display()))?;
    }
    Ok(bundles)
}

/// `config` as the own daemon runs: its bundles, its state and SQLite
/// queue under `root`, loopback on a free port, no keys or token (it is
/// reached only by this command), no telemetry export.
fn own_settings(config: &mut Config, root: &Path, bundles: PathBuf) {
    config.paths.bundles_dir = bundles;
    config.paths.state_dir = root.join("state");
    config.queue.backend = QueueBackend::Sqlite;
    config.queue.path = None;
    config.queue.url = None;
    config.server.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.server.token_file = None;
    config.server.token_env = None;
    config.auth = Default::default();
    config.telemetry = Default::default();
}

fn remove(root: &Path) {
    if let Err(e) = std::fs::remove_dir_all(root) {
        tracing::warn!(dir = %root.display(), error = %e, "cannot remove the eval's directory");
    }
}

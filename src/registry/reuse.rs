//! Which bundle directories a reload reads, decided before anything is
//! read (diff first, as Vector does): a directory is loaded again only when
//! something its load depends on changed — its own files (the paths the
//! watcher names, or its stamp when no one says which paths changed), the
//! inputs every binding depends on ([`Inputs`], a fingerprint of the ones
//! `inputs::INPUTS` declares), or its MCP
//! tools (a server announced new ones). Every other directory keeps its
//! last load, healthy or broken, without a file of it being opened.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::inputs::{INPUTS, Sources};
use super::stamp::{self, Recorded};
use super::watch::Changed;
use super::{LoadedBundle, RegistryError};

/// The last load of one bundle directory.
#[derive(Clone)]
pub(super) struct DirLoad {
    /// The directory's stamp, taken before it was read.
    pub stamp: Recorded,
    /// The bound bundle, or the located errors that refused it.
    pub result: Result<Arc<LoadedBundle>, Vec<String>>,
}

/// The last load of every bundle directory, by directory (in name order).
pub(super) type DirLoads = BTreeMap<PathBuf, DirLoad>;

/// A fingerprint of everything outside a bundle's directory that its load
/// and binding read: of every input `inputs::INPUTS` declares. When it
/// changes, every directory is loaded again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Inputs([u8; 32]);

impl Inputs {
    /// Reads no file: the model configs count by the digest of the files
    /// the catalog was read from.
    pub(super) fn of(sources: &Sources) -> Inputs {
        let mut hash = Sha256::new();
        for input in &INPUTS {
            let fingerprint = (input.fingerprint)(sources);
            hash.update(input.name.as_bytes());
            hash.update([0]);
            hash.update((fingerprint.len() as u64).to_le_bytes());
            hash.update(&fingerprint);
        }
        Inputs(hash.finalize().into())
    }
}

/// What a reload does with each bundle directory.
pub(super) struct Plan<'p> {
    /// Every bundle directory, in name order: its last load to keep, or
    /// `None` to load it now.
    pub dirs: Vec<(PathBuf, Option<&'p DirLoad>)>,
}

impl<'p> Plan<'p> {
    /// Decides, reading no bundle file: `changed` says what changed on disk
    /// since `before` was loaded with `before_inputs`; `inputs` are this
    /// reload's. Lists the bundles directory only when the changed paths
    /// cannot say which directories changed.
    pub(super) fn make(
        root: &Path,
        changed: &Changed,
        before: &'p DirLoads,
        before_inputs: Option<Inputs>,
        inputs: Inputs,
    ) -> Result<Plan<'p>, RegistryError> {
        if before_inputs != Some(inputs) {
            let dirs = bundle_dirs(root)?;
            return Ok(Plan {
                dirs: dirs.into_iter().map(|d| (d, None)).collect(),
            });
        }
        let keep = |load: &'p DirLoad| Some(load).filter(|l| !stale(l));
        let dirs = match changed.under(root) {
            // The watcher named the changed directories: every other one is
            // as it was, not even listed again.
            Some(touched) => {
                let mut dirs: BTreeMap<PathBuf, Option<&DirLoad>> = before
                    .iter()
                    .filter(|(dir, _)| !touched.contains(*dir))
                    .map(|(dir, load)| (dir.clone(), keep(load)))
                    .collect();
                dirs.extend(
                    touched
                        .into_iter()
                        .filter(|dir| is_bundle_dir(dir))
                        .map(|dir| (dir, None)),
                );
                dirs.into_iter().collect()
            }
            // No one says what changed: each directory's stamp does.
            None => bundle_dirs(root)?
                .into_iter()
                .map(|dir| {
                    let load = before
                        .get(&dir)
                        .filter(|load| load.stamp.matches(stamp::stamp(&dir)))
                        .and_then(keep);
                    (dir, load)
                })
                .collect(),
        };
        Ok(Plan { dirs })
    }
}

/// A load whose MCP server announced new tools: bind again.
fn stale(load: &DirLoad) -> bool {
    load.result.as_ref().is_ok_and(|b| b.tools.stale())
}

fn is_bundle_dir(path: &Path) -> bool {
    // Hidden and editor-temporary directories are not bundles.
    let hidden = path
        .file_name()
        .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."));
    !hidden && path.is_dir() && crate::bundle::bundle_file(path).is_some()
}

/// The bundle directories under `root`, in name order.
fn bundle_dirs(root: &Path) -> Result<Vec<PathBuf>, RegistryError> {
    let entries = std::fs::read_dir(root).map_err(|source| RegistryError::BundlesDir {
        dir: root.to_path_buf(),
        source,
    })?;
    let dirs: BTreeSet<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| is_bundle_dir(p))
        .collect();
    Ok(dirs.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    use super::*;
    use crate::config::Config;
    use crate::events::daemon::InputKind;
    use crate::registry::{Applied, BundleStatus, Registry};

    struct Site {
        dir: tempfile::TempDir,
        config: Arc<Config>,
        registry: Arc<Registry>,
    }

    impl Site {
        fn new(bundles: &[&str]) -> Site {
            let dir = tempfile::tempdir().unwrap();
            let mut config = Config::default();
            for sub in ["bundles", "models", "state"] {
                std::fs::create_dir(dir.path().join(sub)).unwrap();
            }
            config.paths.bundles_dir = dir.path().join("bundles");
            config.paths.models_dir = dir.path().join("models");
            config.paths.plugins_dir = dir.path().join("plugins");
            config.paths.state_dir = dir.path().join("state");
            let config = Arc::new(config);
            let site = Site {
                registry: Registry::new(config.clone(), None, Default::default()),
                config,
                dir,
            };
            for name in bundles {
                site.put(name, "");
            }
            site
        }

        fn bundle_dir(&self, name: &str) -> PathBuf {
            self.dir.path().join("bundles").join(name)
        }

        fn put(&self, name: &str, extra: &str) {
            let dir = self.bundle_dir(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("bundle.yaml"),
                format!(
                    "name: {name}\nversion: \"1\"\nmodel: {{endpoint: \"http://127.0.0.1:9\", name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n{extra}"
                ),
            )
            .unwrap();
        }

        /// The reload's outcome and the directories `bundle::load_dir`
        /// parsed meanwhile (the operator's or copies in the store).
        async fn reload(&self, changed: Changed) -> (Applied, Vec<PathBuf>) {
            self.reload_with(self.config.clone(), changed).await
        }

        async fn reload_with(
            &self,
            config: Arc<Config>,
            changed: Changed,
        ) -> (Applied, Vec<PathBuf>) {
            let before = parses_under(self.dir.path()).len();
            let applied = self.registry.apply(config, changed).await.unwrap();
            let mut parsed = parses_under(self.dir.path()).split_off(before);
            parsed.sort();
            (applied, parsed)
        }
    }

    /// Every parse by `bundle::load_dir` of a directory under `root`.
    fn parses_under(root: &Path) -> Vec<PathBuf> {
        crate::bundle::PARSED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|dir| dir.starts_with(root))
            .cloned()
            .collect()
    }

    const NONE: [PathBuf; 0] = [];

    /// Lets the files written so far age past the racy window, so the next
    /// load records stamps it may trust.
    fn age() {
        std::thread::sleep(stamp::RACY + Duration::from_millis(10));
    }

    fn changed(applied: &Applied) -> Vec<String> {
        applied
            .changes
            .iter()
            .find(|c| c.kind == InputKind::Bundle)
            .map(|c| c.changed.clone())
            .unwrap_or_default()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reload_with_nothing_changed_parses_no_bundle() {
        let site = Site::new(&["a", "b", "c"]);
        age();
        let (first, parsed) = site.reload(Changed::Everything).await;
        assert_eq!(parsed.len(), 3);
        assert!(first.errors.is_empty(), "{:?}", first.errors);

        let (again, parsed) = site.reload(Changed::Everything).await;
        assert_eq!(parsed, NONE);
        assert_eq!(again.read, NONE);
        assert!(again.changes.is_empty(), "{:?}", again.changes);
        let (watched, parsed) = site.reload(Changed::nothing()).await;
        assert_eq!(parsed, NONE);
        assert_eq!(watched.read, NONE);
        assert_eq!(site.registry.snapshot().loaded().count(), 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_changed_bundle_is_parsed_once_and_the_others_not_at_all() {
        let site = Site::new(&["a", "b", "c"]);
        age();
        site.reload(Changed::Everything).await;
        site.put("b", "description: edited\n");
        let file = site.bundle_dir("b").join("bundle.yaml");
        let (applied, parsed) = site.reload(Changed::Paths([file].into())).await;
        // Once: the operator's directory; its copy in the store is not parsed.
        assert_eq!(parsed, [site.bundle_dir("b")]);
        assert_eq!(applied.read, [site.bundle_dir("b")]);
        assert_eq!(changed(&applied), ["b"]);
        let serving = site.registry.snapshot().bundle("b").cloned().unwrap();
        assert_eq!(serving.bundle.raw.description, "edited");
        assert!(serving.bundle.dir.starts_with(&site.config.paths.state_dir));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_edit_the_watcher_never_reported_is_noticed_by_its_stamp() {
        let site = Site::new(&["a", "b"]);
        age();
        site.reload(Changed::Everything).await;
        site.put("a", "description: behind the watcher's back\n");
        // SIGHUP or the API: no one says what changed.
        let (applied, parsed) = site.reload(Changed::Everything).await;
        assert_eq!(parsed, [site.bundle_dir("a")]);
        assert_eq!(changed(&applied), ["a"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chmod_that_makes_a_bundle_untrusted_is_still_refused() {
        let site = Site::new(&["a", "b"]);
        age();
        site.reload(Changed::Everything).await;
        let file = site.bundle_dir("a").join("bundle.yaml");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let (applied, parsed) = site.reload(Changed::Everything).await;
        assert_eq!(parsed, NONE, "refused before parsing");
        assert_eq!(applied.read, [site.bundle_dir("a")]);
        assert_eq!(applied.failed, ["a"]);
        assert!(
            applied.errors[0].contains("chmod go-w"),
            "{:?}",
            applied.errors
        );
        let snapshot = site.registry.snapshot();
        assert_eq!(snapshot.bundles["a"].status, BundleStatus::Degraded);
        // The refusal is kept, and reported again, until the mode is fixed.
        let (again, _) = site.reload(Changed::Everything).await;
        assert_eq!(again.failed, ["a"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_change_of_the_inputs_every_binding_shares_reads_every_bundle_again() {
        let site = Site::new(&["a", "b"]);
        age();
        site.reload(Changed::Everything).await;
        let mut config = (*site.config).clone();
        config.egress.allow = Some(vec!["http://127.0.0.1:9".into()]);
        let (_, parsed) = site.reload_with(Arc::new(config), Changed::nothing()).await;
        assert_eq!(parsed, [site.bundle_dir("a"), site.bundle_dir("b")]);
    }
}

//! What the registry knows of a bundle's versions beyond the one serving:
//! the versions it served since the daemon started, by version, and
//! before that the copies in the bundle store (what an eval compares
//! against), the candidate the release gate holds, and the
//! gate's decisions (`releases.rs`'s record) written one at a time, or
//! mirrored from the ones every daemon on the store shares.

use super::record::Record;
use super::{BundleIdentity, Decision, LoadedBundle, Registry, Releases};

/// The superseded versions of a bundle the registry remembers by version
/// (`Registry::identity_of`).
const SERVED_KEPT: usize = 20;

impl Registry {
    /// The content of bundle `name` at `version`: the loaded one, or the
    /// newest content of that version it served since the daemon started
    /// (`resolve` revives it from the store).
    pub fn identity_of(&self, name: &str, version: &str) -> Option<BundleIdentity> {
        let snapshot = self.snapshot();
        if let Some(loaded) = [snapshot.bundle(name), snapshot.candidate(name)]
            .into_iter()
            .flatten()
            .find(|loaded| loaded.version() == version)
        {
            return Some(loaded.identity.clone());
        }
        let served = self.served.lock().unwrap_or_else(|p| p.into_inner());
        served
            .get(name)?
            .iter()
            .rev()
            .find(|(v, _)| v == version)
            .map(|(_, identity)| identity.clone())
    }

    /// [`Self::identity_of`], or else the content of the newest copy of
    /// that version in the bundle store (served before a restart, or
    /// longer ago than the history kept), found off the runtime thread.
    pub async fn find_version(&self, name: &str, version: &str) -> Option<BundleIdentity> {
        if let Some(identity) = self.identity_of(name, version) {
            return Some(identity);
        }
        let store = super::store::BundleStore::new(&self.snapshot().config.paths.state_dir);
        let (name, version) = (name.to_string(), version.to_string());
        tokio::task::spawn_blocking(move || store.copies_of(&name, &version).into_iter().next())
            .await
            .ok()
            .flatten()
    }

    /// The versions of bundle `name` an eval may name, each once: the one
    /// serving, the candidate the release gate holds, then the versions it
    /// served since the daemon started, newest first (what
    /// [`Registry::identity_of`] finds).
    pub fn versions_of(&self, name: &str) -> Vec<String> {
        let snapshot = self.snapshot();
        let mut versions: Vec<String> = [snapshot.bundle(name), snapshot.candidate(name)]
            .into_iter()
            .flatten()
            .map(|loaded| loaded.version().to_string())
            .collect();
        let served = self.served.lock().unwrap_or_else(|p| p.into_inner());
        for (version, _) in served.get(name).into_iter().flatten().rev() {
            if !versions.contains(version) {
                versions.push(version.clone());
            }
        }
        versions
    }

    /// Makes the state directory's record hold `decisions` (the ones every
    /// daemon on the store shares, `crate::release`'s mirror), replacing
    /// what it held about their contents: the ones that changed it, in
    /// order. The next build serves or holds by them (the caller asks for
    /// the reload).
    pub async fn mirror_releases(
        &self,
        decisions: Vec<(BundleIdentity, Decision)>,
    ) -> std::io::Result<Vec<Decision>> {
        let state_dir = self.snapshot().config.paths.state_dir.clone();
        let lock = self.releases_lock.clone();
        tokio::task::spawn_blocking(move || {
            let _one_writer = lock.lock().unwrap_or_else(|p| p.into_inner());
            let mut releases = Releases::read(&state_dir);
            let mut changed = Vec::new();
            for (identity, decision) in decisions {
                if releases.of(&identity) != Some(&decision) {
                    releases.decide(&identity, decision.clone());
                    changed.push(decision);
                }
            }
            if !changed.is_empty() {
                releases.write(&state_dir)?;
            }
            Ok(changed)
        })
        .await
        .map_err(std::io::Error::other)?
    }

    /// Every decision the state directory's record holds, by identity.
    pub async fn recorded_releases(&self) -> Releases {
        let state_dir = self.snapshot().config.paths.state_dir.clone();
        tokio::task::spawn_blocking(move || Releases::read(&state_dir))
            .await
            .unwrap_or_default()
    }

    /// Remembers that `loaded` served (when it is superseded).
    pub(super) fn remember_served(&self, loaded: &LoadedBundle) {
        let mut served = self.served.lock().unwrap_or_else(|p| p.into_inner());
        let versions = served.entry(loaded.name().to_string()).or_default();
        versions.retain(|(_, identity)| *identity != loaded.identity);
        versions.push((loaded.version().to_string(), loaded.identity.clone()));
        if versions.len() > SERVED_KEPT {
            versions.remove(0);
        }
    }
}

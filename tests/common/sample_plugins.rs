//! The workspace's sample plugins built for the plugin tests, with their
//! build-time variants (`SA_<NAME>_VARIANT`), into the tests' own target
//! directory (`target/plugin-tests`, never waiting on the outer cargo's
//! build lock), and dropped into a plugins directory as an operator should.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A sample plugin crate of the workspace.
pub struct SamplePlugin {
    /// The cargo package, e.g. `sa-plugin-mistral`.
    pub package: &'static str,
    /// The environment variable its build reads its variant from.
    pub variant_env: &'static str,
    /// The library's file name, e.g. `libsa_plugin_mistral.so`.
    pub library: &'static str,
}

impl SamplePlugin {
    /// Builds `variants` (`None`: the normal build) in order and returns a
    /// copy of each library. The tests of one file run as processes of
    /// their own, at once: one builds while the others wait on a lock
    /// (each build overwrites the same output, copied before the next).
    pub fn build(&self, variants: &[Option<&str>]) -> Vec<PathBuf> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let target = root.join("target/plugin-tests");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        std::fs::create_dir_all(&target).unwrap();
        let lock = std::fs::File::create(target.join(format!("{}.lock", self.package))).unwrap();
        let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| e)
            .unwrap();
        let build = |variant: Option<&str>| {
            let mut cmd = Command::new(&cargo);
            cmd.current_dir(root)
                .args(["build", "--quiet", "-p", self.package, "--target-dir"])
                .arg(&target)
                .env_remove(self.variant_env);
            if let Some(v) = variant {
                cmd.env(self.variant_env, v);
            }
            let status = cmd.status().unwrap_or_else(|e| {
                panic!("cargo must be available to build {}: {e}", self.package)
            });
            assert!(status.success(), "building {} failed", self.package);
            let copy = target.join(format!(
                "{}-{}.so",
                self.package,
                variant.unwrap_or("normal")
            ));
            std::fs::copy(target.join("debug").join(self.library), &copy).unwrap();
            copy
        };
        variants.iter().map(|v| build(*v)).collect()
    }

    /// Puts `library` into `dir` under the plugin's file name, the way an
    /// operator should: copied aside (beside `dir`, where no watcher loads
    /// it) with mode 0755, then renamed in.
    pub fn drop_into(&self, dir: &Path, library: &Path) {
        let aside = dir.with_extension("aside");
        std::fs::copy(library, &aside).unwrap();
        std::fs::set_permissions(&aside, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&aside, dir.join(self.library)).unwrap();
    }
}

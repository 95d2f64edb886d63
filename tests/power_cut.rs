//! A power cut right after the daemon made a bundle copy. The state
//! directory is a loop-mounted ext4 image; moments after the copy is made
//! (and a job pinned to it is running) the filesystem is shut down with
//! `FS_IOC_SHUTDOWN` and `NOLOGFLUSH` — the disk keeps what was synced and
//! nothing else, as when the power goes — the daemon is killed, the image
//! unmounted and mounted again, and a new daemon starts on it: the copy is
//! whole (no rebuild needed; an unsynced one comes back empty and only its
//! rebuild from the source would save it), and the pinned job and new jobs
//! succeed. A file written without a sync just before the cut comes back
//! missing or short, which proves the cut loses what a copy made without
//! syncing would lose.
//!
//! Needs root and a free loop device; it fails (never skips) without them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::daemon::{Daemon, SHORT_LEASE, Site, client, get, submit, submit_and_wait};
use common::daemon::{eventually, wait_terminal};
use common::mock_server;
use serde_json::json;

/// Runs `program` with `args`; panics naming the command and its output
/// when it fails.
fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{program} {}`: {e}", args.join(" ")));
    assert!(
        out.status.success(),
        "`{program} {}` failed ({}): {}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An ext4 image mounted on a directory; unmounted when dropped.
struct Ext4Mount {
    image: PathBuf,
    on: PathBuf,
    mounted: bool,
}

impl Ext4Mount {
    fn new(image: &Path, on: &Path) -> Self {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the power-cut test mounts an ext4 image on a loop device, which needs root; run it as root"
        );
        // A free loop device, or why there is none (a container without
        // /dev/loop-control, say).
        run("losetup", &["-f"]);
        run("truncate", &["-s", "64M", &image.display().to_string()]);
        run("mkfs.ext4", &["-q", "-F", &image.display().to_string()]);
        let mut mount = Self {
            image: image.to_path_buf(),
            on: on.to_path_buf(),
            mounted: false,
        };
        mount.mount();
        mount
    }

    fn mount(&mut self) {
        run(
            "mount",
            &[
                "-o",
                "loop",
                &self.image.display().to_string(),
                &self.on.display().to_string(),
            ],
        );
        self.mounted = true;
    }

    fn unmount(&mut self) {
        run("umount", &[&self.on.display().to_string()]);
        self.mounted = false;
    }

    /// The power cut: `FS_IOC_SHUTDOWN` with `FS_GOING_FLAGS_NOLOGFLUSH`
    /// (2): every later access fails, and the journal is not flushed, so
    /// only what was synced is on the disk.
    fn cut_power(&self) {
        let code = format!(
            "import fcntl, os, struct\nfd = os.open({:?}, os.O_RDONLY)\nfcntl.ioctl(fd, 0x8004587D, struct.pack('I', 2))",
            self.on.display().to_string()
        );
        run("python3", &["-c", &code]);
    }
}

impl Drop for Ext4Mount {
    fn drop(&mut self) {
        if self.mounted {
            let on = self.on.display().to_string();
            if Command::new("umount")
                .arg(&on)
                .status()
                .map_or(true, |s| !s.success())
            {
                let _ = Command::new("umount").args(["-l", &on]).status();
            }
        }
    }
}

/// The copies in the state directory's bundle store.
fn copies(state: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(state.join("bundles"))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().path())
                .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_power_cut_right_after_a_copy_is_made_leaves_a_usable_copy() {
    // The job's first reply takes a while, so the job is running, pinned
    // to the copy, when the power goes (and again after the restart).
    let mock = mock_server(
        "replies:\n  - {match: again, content: fresh}\n  - {match: pay, turn: 1, delay_ms: 1500, content: paid}\n",
    )
    .await;
    let site = Site::new(&mock.base_url(), "");
    let state = site.path().join("state");
    let bundle = "name: pay\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {system: \"You pay bills.\", user: \"{{ input }}\"}\n";
    site.put_bundle("pay", bundle);
    let mut disk = Ext4Mount::new(&site.path().join("state.img"), &state);

    let http = client();
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let id = submit(&http, &daemon, "pay", "pay the rent").await["id"]
        .as_str()
        .unwrap()
        .to_string();
    eventually(Duration::from_secs(30), "the job runs", || async {
        let job = get(&http, &daemon, &format!("/v1/jobs/{id}")).await;
        (job["state"] == "running").then_some(())
    })
    .await;
    let made = copies(&state);
    assert_eq!(made.len(), 1, "one copy of pay: {made:?}\n{}", daemon.log());
    let probe = state.join("unsynced.txt");
    std::fs::write(&probe, "x".repeat(4096)).unwrap();
    disk.cut_power();
    daemon.kill9();
    disk.unmount();
    disk.mount();

    let probe_len = std::fs::metadata(&probe).map_or(0, |m| m.len());
    assert!(
        probe_len < 4096,
        "a file written without a sync survived the cut whole: the cut did not cut"
    );
    let daemon: Daemon = site.start();
    let status = get(&http, &daemon, "/v1/bundles/pay").await;
    assert_eq!(status["status"], "ok", "{status}\n{}", daemon.log());
    // Written durably, the copy needed no rebuild (a copy left unsynced
    // comes back empty here, and is rebuilt from its source).
    assert!(
        !daemon.log().contains("a bundle copy is damaged"),
        "the copy did not survive the cut as it was made:\n{}",
        daemon.log()
    );
    let copy = &made[0];
    let source = std::fs::read(site.path().join("bundles/pay/bundle.yaml")).unwrap();
    assert_eq!(
        std::fs::read(copy.join("bundle.yaml")).unwrap(),
        source,
        "the copy {} after the cut (rebuilt or kept)\n{}",
        copy.display(),
        daemon.log()
    );
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["result"]["output"], "paid");
    let fresh = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "pay", "input": "again"}),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(fresh["state"], "succeeded", "{fresh}");
    assert_eq!(fresh["result"]["output"], "fresh", "{fresh}");
    daemon.stop();
}

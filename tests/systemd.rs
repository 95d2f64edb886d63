//! The systemd unit: `systemd-analyze verify` accepts it, and it carries the
//! directives operators rely on.

use std::process::Command;

#[test]
fn unit_verifies_and_is_hardened() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/structured-agents.service"
    ))
    .unwrap();
    for directive in [
        "Type=notify",
        "ExecStartPre=/usr/bin/structured-agents validate --config",
        "ExecReload=/usr/bin/structured-agents reload --config",
        "StateDirectory=structured-agents",
        "ConfigurationDirectory=structured-agents",
        "User=structured-agents",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "PrivateDevices=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "RestrictAddressFamilies=",
        "RestrictNamespaces=yes",
        "SystemCallFilter=@system-service",
        "CapabilityBoundingSet=\n",
        "UMask=077",
        "Restart=on-failure",
        "WatchdogSec=",
    ] {
        assert!(unit.contains(directive), "unit lacks {directive:?}");
    }
    // Point the unit at the binary under test so verify can check the commands.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("structured-agents.service");
    std::fs::write(
        &path,
        unit.replace(
            "/usr/bin/structured-agents",
            env!("CARGO_BIN_EXE_structured-agents"),
        ),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze is needed for this test (Debian package systemd)");
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("structured-agents.service:"),
        "warnings about the unit:\n{stderr}"
    );
}

/// The unit's open-files limit leaves room for the default connection cap
/// and the descriptors the daemon keeps besides: past it, `accept` would
/// fail for everyone instead of the cap answering 503.
#[test]
fn the_open_files_limit_is_above_the_connection_cap() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/structured-agents.service"
    ))
    .unwrap();
    let limit: u64 = unit
        .lines()
        .find_map(|line| line.strip_prefix("LimitNOFILE="))
        .expect("the unit sets LimitNOFILE=")
        .trim()
        .parse()
        .expect("LimitNOFILE= is one number");
    let cap = structured_agents::config::ServerConfig::default().max_connections as u64;
    assert!(
        limit >= cap + structured_agents::daemon::SPARE_FILES,
        "LimitNOFILE={limit} leaves no room above server.max_connections = {cap}"
    );
}

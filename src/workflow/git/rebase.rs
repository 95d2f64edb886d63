//! The built-in `rebase` gate: fetch the remote and rebase onto its base
//! branch; a conflict aborts the rebase and names the conflicting files.

use std::path::Path;

use crate::workflow::gate::{GateContext, GateReport};
use crate::workflow::spec::RebaseSettings;

pub(crate) async fn rebase_gate(
    ctx: &GateContext<'_>,
    settings: &RebaseSettings,
    dir: &Path,
) -> GateReport {
    const CONFLICT: &str = "conflict";
    let fetch = ctx.git(dir, &["fetch", &settings.remote]).await;
    if !fetch.success() {
        return GateReport::fail(
            CONFLICT,
            fetch.describe(&format!("git fetch {}", settings.remote)),
            "check that the remote is reachable",
        );
    }
    let onto = ctx
        .base(dir, "rebase.onto", settings.onto.as_ref(), &settings.remote)
        .await;
    let onto = match onto {
        Ok(onto) => onto,
        Err(e) => {
            return GateReport::fail(
                CONFLICT,
                e.to_string(),
                "set `rebase.onto` on the rebase stage",
            );
        }
    };
    let upstream = format!("{}/{onto}", settings.remote);
    let rebase = ctx.git(dir, &["rebase", &upstream]).await;
    if rebase.success() {
        let mut report = GateReport::new("ok", true);
        report.details.insert("onto".into(), upstream.into());
        return report;
    }
    // Which files conflict is only known before the abort.
    let conflicted = ctx
        .git(dir, &["diff", "--name-only", "--diff-filter=U"])
        .await;
    let abort = ctx.git(dir, &["rebase", "--abort"]).await;
    let mut report = GateReport::fail(
        CONFLICT,
        rebase.describe(&format!("git rebase {upstream}")),
        format!("resolve the conflicts with {upstream} by hand"),
    );
    report.failed_files = conflicted.stdout.lines().map(String::from).collect();
    if !abort.success() {
        report
            .traceback
            .push_str(&format!("\n{}", abort.describe("git rebase --abort")));
    }
    report
}

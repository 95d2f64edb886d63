//! Tests of `telemetry::metrics`.

use super::*;

/// A stale settle is counted by the kind of claim it held, and only
/// by the stale-settle counter.
#[test]
fn a_stale_settle_is_counted_by_its_claim() {
    use crate::events::daemon::StaleClaim;
    let metrics = Metrics::new().unwrap();
    for claim in [
        StaleClaim::Delivery,
        StaleClaim::Delivery,
        StaleClaim::ScheduleFire,
    ] {
        metrics.on_daemon_event(&DaemonEvent::StaleSettle { claim });
    }
    let text = metrics.render();
    assert!(
        text.contains("structured_agents_stale_settles_total{claim=\"delivery\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("structured_agents_stale_settles_total{claim=\"schedule_fire\"} 1"),
        "{text}"
    );
    assert!(!text.contains("structured_agents_webhook_deliveries_total{"));
}

//! Which fires of a schedule are due, by its `missed` policy: the one rule,
//! pure, so every daemon sharing a store computes the same fires (and so
//! the same idempotency keys) from the same stored state.

use chrono::{DateTime, TimeZone};
use chrono_tz::Tz;
use croner::Cron;

use super::spec::{Missed, next_after};

/// A fire handled this much after its time counts as on time; older ones
/// were missed (no daemon ran then).
pub const GRACE_MS: i64 = 60_000;

/// The fires to submit now and the next fire after them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// Fire times (ms since the epoch), oldest first.
    pub fires: Vec<i64>,
    /// Whether due fires were passed over (missed and not run).
    pub passed_over: bool,
    /// The first fire after `now`; `None` if the cron never fires again.
    pub next: Option<i64>,
}

/// The fires due at `now` of a schedule whose first unhandled fire is
/// `next_fire`. Fires are found walking back from `now`, so a schedule
/// missed for a long time costs at most `max_catch_up` steps.
pub fn due_fires(
    compiled: &(Cron, Tz),
    missed: Missed,
    max_catch_up: u32,
    next_fire: i64,
    now: i64,
) -> Due {
    let next = next_after(compiled, now);
    let limit = match missed {
        Missed::Skip | Missed::RunOnce => 1,
        Missed::RunAll => max_catch_up.max(1) as usize,
    };
    let mut newest_first = Vec::new();
    let mut cursor = at_or_before(compiled, now, true);
    while let Some(fire) = cursor.filter(|fire| *fire >= next_fire) {
        if newest_first.len() == limit {
            break;
        }
        newest_first.push(fire);
        cursor = at_or_before(compiled, fire, false);
    }
    let mut passed_over = cursor.is_some_and(|older| older >= next_fire);
    if missed == Missed::Skip
        && newest_first
            .first()
            .is_some_and(|newest| now - newest > GRACE_MS)
    {
        newest_first.clear();
        passed_over = true;
    }
    newest_first.reverse();
    Due {
        fires: newest_first,
        passed_over,
        next,
    }
}

/// The fire at or before (`inclusive`) or strictly before `ms`.
fn at_or_before((cron, tz): &(Cron, Tz), ms: i64, inclusive: bool) -> Option<i64> {
    let at: DateTime<Tz> = tz.timestamp_millis_opt(ms).single()?;
    cron.find_previous_occurrence(&at, inclusive)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// The idempotency key of a schedule's fire: the same on every daemon, so
/// the fire becomes one job however many daemons handle it.
pub fn fire_key(schedule: &str, fire_ms: i64) -> String {
    format!("schedule:{schedule}:{fire_ms}")
}

#[cfg(test)]
mod tests {
    use super::super::spec::ScheduleSpec;
    use super::*;

    fn compiled(cron: &str, tz: &str) -> (Cron, Tz) {
        let spec: ScheduleSpec =
            serde_json::from_value(serde_json::json!({"cron": cron, "timezone": tz})).unwrap();
        spec.compile().unwrap()
    }

    fn ms(rfc3339: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn next_fire_follows_the_time_zone_across_daylight_saving_time() {
        // 09:00 in Berlin: 08:00 UTC in winter, 07:00 UTC in summer
        // (clocks went forward on 2026-03-29).
        let berlin = compiled("0 9 * * *", "Europe/Berlin");
        assert_eq!(
            next_after(&berlin, ms("2026-03-28T12:00:00Z")),
            Some(ms("2026-03-29T07:00:00Z"))
        );
        assert_eq!(
            next_after(&berlin, ms("2026-03-27T12:00:00Z")),
            Some(ms("2026-03-28T08:00:00Z"))
        );
        // 02:30 does not exist on the spring-forward day in New York: that
        // day's fire comes when the gap ends (03:00 EDT), once.
        let new_york = compiled("30 2 * * *", "America/New_York");
        let next = next_after(&new_york, ms("2026-03-08T05:00:00Z")).unwrap();
        assert_eq!(next, ms("2026-03-08T07:00:00Z"));
        assert_eq!(
            next_after(&new_york, next),
            Some(ms("2026-03-09T06:30:00Z"))
        );
        // 01:30 happens twice on the fall-back day: it fires once.
        let fall = compiled("30 1 * * *", "America/New_York");
        let first = next_after(&fall, ms("2026-11-01T04:00:00Z")).unwrap();
        assert_eq!(first, ms("2026-11-01T05:30:00Z"));
        assert_eq!(next_after(&fall, first), Some(ms("2026-11-02T06:30:00Z")));
        // UTC with seconds.
        let every_ten = compiled("*/10 * * * * *", "UTC");
        assert_eq!(
            next_after(&every_ten, ms("2026-01-01T00:00:05Z")),
            Some(ms("2026-01-01T00:00:10Z"))
        );
    }

    #[test]
    fn a_bad_cron_or_time_zone_names_the_key_at_fault() {
        let bad = |cron: &str, tz: &str| {
            let spec: ScheduleSpec =
                serde_json::from_value(serde_json::json!({"cron": cron, "timezone": tz})).unwrap();
            spec.compile().unwrap_err().to_string()
        };
        assert!(bad("61 * * * *", "UTC").starts_with("schedule.cron:"));
        assert!(bad("* * * * *", "Mars/Olympus").starts_with("schedule.timezone:"));
    }

    const HOURLY: &str = "0 * * * *";

    #[test]
    fn an_on_time_fire_is_due_under_every_policy() {
        let hourly = compiled(HOURLY, "UTC");
        let next = ms("2026-01-01T10:00:00Z");
        for missed in [Missed::Skip, Missed::RunOnce, Missed::RunAll] {
            let due = due_fires(&hourly, missed, 10, next, next + 500);
            assert_eq!(due.fires, [next], "{missed:?}");
            assert!(!due.passed_over);
            assert_eq!(due.next, Some(ms("2026-01-01T11:00:00Z")));
        }
        let early = due_fires(&hourly, Missed::RunAll, 10, next, next - 1);
        assert!(early.fires.is_empty());
    }

    #[test]
    fn missed_fires_are_skipped_run_once_or_all_within_the_bound() {
        let hourly = compiled(HOURLY, "UTC");
        // Down from before 10:00 until 15:30: 10, 11, 12, 13, 14, 15 missed.
        let next = ms("2026-01-01T10:00:00Z");
        let now = ms("2026-01-01T15:30:00Z");
        let skip = due_fires(&hourly, Missed::Skip, 10, next, now);
        assert!(skip.fires.is_empty() && skip.passed_over);
        assert_eq!(skip.next, Some(ms("2026-01-01T16:00:00Z")));
        let once = due_fires(&hourly, Missed::RunOnce, 10, next, now);
        assert_eq!(once.fires, [ms("2026-01-01T15:00:00Z")]);
        assert!(once.passed_over);
        let all = due_fires(&hourly, Missed::RunAll, 10, next, now);
        let hours: Vec<i64> = (10..=15)
            .map(|h| ms(&format!("2026-01-01T{h}:00:00Z")))
            .collect();
        assert_eq!(all.fires, hours);
        assert!(!all.passed_over);
        let bounded = due_fires(&hourly, Missed::RunAll, 4, next, now);
        assert_eq!(bounded.fires, hours[2..]);
        assert!(bounded.passed_over);
    }

    #[test]
    fn a_long_outage_costs_at_most_the_bound_in_steps() {
        let every_second = compiled("* * * * * *", "UTC");
        let next = ms("2025-01-01T00:00:00Z");
        let now = ms("2026-01-01T00:00:00Z");
        let all = due_fires(&every_second, Missed::RunAll, 3, next, now);
        assert_eq!(all.fires, [now - 2000, now - 1000, now]);
    }

    #[test]
    fn fire_keys_are_the_same_on_every_daemon() {
        assert_eq!(fire_key("nightly", 1000), "schedule:nightly:1000");
    }
}

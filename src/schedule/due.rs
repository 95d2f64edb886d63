//! Which fires of a schedule are due, by its `missed` policy: the one rule,
//! pure, so every daemon sharing a store computes the same fires (and so
//! the same idempotency keys) from the same stored state.

use super::spec::{Compiled, Missed, at_or_before, next_after};

/// A fire handled this much after its time counts as on time; older ones
/// were missed (no daemon ran then).
pub const GRACE_MS: i64 = 60_000;

/// Passed-over fires counted one by one at most; past it the count is
/// estimated from the cron's rate over those (a year of a cron every
/// second is not walked).
const COUNT_WALK: u64 = 10_000;

/// The fires due now, oldest first, and what the policy passed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The fires to run, oldest first (ms since the epoch): every fire
    /// within the grace, after the late ones `missed` keeps. The schedule
    /// runs them one at a time (`overlap`).
    pub fires: Vec<i64>,
    /// Late fires the policy passed over: their number.
    pub missed: u64,
    /// The first fire after `now`; `None` if the cron never fires again.
    pub next: Option<i64>,
}

/// The fires due at `now` of a schedule whose first unhandled fire is
/// `next_fire`. A fire at most [`GRACE_MS`] old is on time under every
/// policy; older ones are late, and `missed` decides: `skip` passes them
/// over, `run_once` keeps the newest, `run_all` the newest `max_catch_up`.
/// Fires are found walking back from `now`, so a schedule missed for a
/// long time costs at most the grace's fires, `max_catch_up` steps and
/// the bounded count of the rest.
pub fn due_fires(
    compiled: &Compiled,
    missed: Missed,
    max_catch_up: u32,
    next_fire: i64,
    now: i64,
) -> Due {
    let next = next_after(compiled, now);
    let keep_late = match missed {
        Missed::Skip => 0,
        Missed::RunOnce => 1,
        Missed::RunAll => max_catch_up.max(1) as usize,
    };
    let mut newest_first = Vec::new();
    let mut late_kept = 0;
    let mut cursor = at_or_before(compiled, now, true);
    while let Some(fire) = cursor.filter(|fire| *fire >= next_fire) {
        let on_time = now - fire <= GRACE_MS;
        if !on_time && late_kept == keep_late {
            break;
        }
        late_kept += usize::from(!on_time);
        newest_first.push(fire);
        cursor = at_or_before(compiled, fire, false);
    }
    newest_first.reverse();
    Due {
        fires: newest_first,
        missed: passed_over(compiled, cursor, next_fire),
        next,
    }
}

/// How many fires from `newest` back to `oldest` (inclusive) there are:
/// counted up to [`COUNT_WALK`], estimated from their rate past it.
fn passed_over(compiled: &Compiled, newest: Option<i64>, oldest: i64) -> u64 {
    let Some(first) = newest.filter(|fire| *fire >= oldest) else {
        return 0;
    };
    let mut count = 0;
    let mut cursor = Some(first);
    while let Some(fire) = cursor.filter(|fire| *fire >= oldest) {
        count += 1;
        if count == COUNT_WALK {
            // The rest at the rate of the ones counted.
            let rate = (first - fire).max(1) as f64 / (count - 1).max(1) as f64;
            return count + ((fire - oldest) as f64 / rate) as u64;
        }
        cursor = at_or_before(compiled, fire, false);
    }
    count
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

    fn compiled(cron: &str, tz: &str) -> Compiled {
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

    /// `until` ends a schedule: no fire after it is next or due, and a
    /// spec whose every fire would come after it never fires (refused).
    #[test]
    fn no_fire_comes_after_until() {
        let spec = |until: &str| -> ScheduleSpec {
            serde_json::from_value(serde_json::json!({"cron": HOURLY, "until": until})).unwrap()
        };
        let ending = spec("2099-01-01T10:30:00Z").compile().unwrap();
        assert_eq!(
            next_after(&ending, ms("2099-01-01T09:10:00Z")),
            Some(ms("2099-01-01T10:00:00Z"))
        );
        assert_eq!(next_after(&ending, ms("2099-01-01T10:00:00Z")), None);
        // Down from 09:00 past the end: only fires up to 10:00 count.
        let due = due_fires(
            &ending,
            Missed::RunAll,
            10,
            ms("2099-01-01T09:00:00Z"),
            ms("2099-01-01T12:30:00Z"),
        );
        assert_eq!(
            due.fires,
            [ms("2099-01-01T09:00:00Z"), ms("2099-01-01T10:00:00Z")]
        );
        assert_eq!(due.next, None);
        let ended = spec("2020-01-01T00:00:00Z").compile().unwrap_err();
        assert!(ended.to_string().starts_with("schedule.cron:"), "{ended}");
        let bad = spec("tomorrow").compile().unwrap_err();
        assert!(bad.to_string().starts_with("schedule.until:"), "{bad}");
    }

    const HOURLY: &str = "0 * * * *";

    #[test]
    fn an_on_time_fire_is_due_under_every_policy() {
        let hourly = compiled(HOURLY, "UTC");
        let next = ms("2026-01-01T10:00:00Z");
        for missed in [Missed::Skip, Missed::RunOnce, Missed::RunAll] {
            let due = due_fires(&hourly, missed, 10, next, next + 500);
            assert_eq!(due.fires, [next], "{missed:?}");
            assert_eq!(due.missed, 0);
            assert_eq!(due.next, Some(ms("2026-01-01T11:00:00Z")));
        }
        let early = due_fires(&hourly, Missed::RunAll, 10, next, next - 1);
        assert!(early.fires.is_empty());
    }

    /// A 5 s outage of a cron every 2 s: the 2–3 fires it held are all
    /// within the grace, so every policy runs each of them (`skip` and
    /// `run_once` once ran only the newest).
    #[test]
    fn fires_within_the_grace_are_on_time_under_every_policy() {
        let every_two = compiled("*/2 * * * * *", "UTC");
        let next = ms("2026-01-01T10:00:00Z");
        let now = next + 5_500;
        for missed in [Missed::Skip, Missed::RunOnce, Missed::RunAll] {
            let due = due_fires(&every_two, missed, 1, next, now);
            assert_eq!(due.fires, [next, next + 2000, next + 4000], "{missed:?}");
            assert_eq!(due.missed, 0, "{missed:?}");
        }
    }

    #[test]
    fn late_fires_are_skipped_run_once_or_all_within_the_bound() {
        let hourly = compiled(HOURLY, "UTC");
        // Down from before 10:00 until 15:30: 10, 11, 12, 13, 14, 15 late.
        let next = ms("2026-01-01T10:00:00Z");
        let now = ms("2026-01-01T15:30:00Z");
        let skip = due_fires(&hourly, Missed::Skip, 10, next, now);
        assert!(skip.fires.is_empty());
        assert_eq!(skip.missed, 6);
        assert_eq!(skip.next, Some(ms("2026-01-01T16:00:00Z")));
        let once = due_fires(&hourly, Missed::RunOnce, 10, next, now);
        assert_eq!(once.fires, [ms("2026-01-01T15:00:00Z")]);
        assert_eq!(once.missed, 5);
        let all = due_fires(&hourly, Missed::RunAll, 10, next, now);
        let hours: Vec<i64> = (10..=15)
            .map(|h| ms(&format!("2026-01-01T{h}:00:00Z")))
            .collect();
        assert_eq!(all.fires, hours);
        assert_eq!(all.missed, 0);
        let bounded = due_fires(&hourly, Missed::RunAll, 4, next, now);
        assert_eq!(bounded.fires, hours[2..]);
        assert_eq!(bounded.missed, 2);
    }

    /// After a 75 s outage of a cron every 5 s with `max_catch_up: 4`: the
    /// 13 fires of the last minute are on time and run under every policy;
    /// the 3 late ones are caught up (`run_all`, within 4) or passed over
    /// and counted, each (`skip`). (Once 4 ran, 11 were dropped and the
    /// metric said 4 missed.)
    #[test]
    fn the_missed_count_is_the_number_passed_over() {
        let every_five = compiled("*/5 * * * * *", "UTC");
        let next = ms("2026-01-01T10:00:00Z");
        let now = next + 75_000;
        let all = due_fires(&every_five, Missed::RunAll, 4, next, now);
        let on_time = all.fires.iter().filter(|f| now - **f <= GRACE_MS).count();
        assert_eq!(on_time, 13);
        assert_eq!(all.fires.len(), 13 + 3, "the three late fires, within 4");
        assert_eq!(all.missed, 0);
        let skip = due_fires(&every_five, Missed::Skip, 4, next, now);
        assert_eq!((skip.fires.len(), skip.missed), (13, 3));
    }

    #[test]
    fn a_long_outage_costs_at_most_the_bound_in_steps() {
        let every_second = compiled("* * * * * *", "UTC");
        let next = ms("2025-01-01T00:00:00Z");
        let now = ms("2026-01-01T00:00:00Z");
        let all = due_fires(&every_second, Missed::RunAll, 3, next, now);
        let on_time: Vec<i64> = (0..=60).rev().map(|s| now - s * 1000).collect();
        assert_eq!(all.fires[3..], on_time[..]);
        assert_eq!(all.fires[..3], [now - 63_000, now - 62_000, now - 61_000]);
        // A year of seconds, less those run: estimated past the walk, and
        // close (the cron's rate is even).
        let year = (now - next) / 1000 + 1;
        let expected = (year - 64) as u64;
        assert!(
            all.missed.abs_diff(expected) <= 2,
            "{} vs {expected}",
            all.missed
        );
    }

    #[test]
    fn fire_keys_are_the_same_on_every_daemon() {
        assert_eq!(fire_key("nightly", 1000), "schedule:nightly:1000");
    }
}

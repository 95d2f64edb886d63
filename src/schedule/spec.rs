//! A schedule's spec (as a bundle's `schedule:` or `POST /v1/schedules`
//! writes it) and its compiled cron.

use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The most missed fires `missed: run_all` submits at once (the newest
/// ones): a daemon down for a month does not flood the queue.
pub const MAX_CATCH_UP: u32 = 1000;

/// Why a spec cannot be used, naming the key at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    #[error(
        "schedule.cron: {cron:?} is not a cron expression ({detail}); write 5 fields (minute hour day month weekday) or 6 with seconds first, e.g. \"0 9 * * MON-FRI\""
    )]
    Cron { cron: String, detail: String },
    #[error(
        "schedule.timezone: {0:?} is not a time zone of the IANA database; write e.g. \"Europe/Berlin\" or \"UTC\""
    )]
    TimeZone(String),
    #[error("schedule.cron: {0:?} never fires")]
    Never(String),
    #[error("schedule.max_catch_up: {0} is out of range: 1 to {MAX_CATCH_UP}")]
    CatchUp(u32),
}

/// What to do with fires that came while no daemon ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// Drop them; the next fire runs on time.
    #[default]
    Skip,
    /// Run one job for all of them (the newest).
    RunOnce,
    /// Run one job per missed fire, the newest `max_catch_up` at most.
    RunAll,
}

/// What to do when a fire comes and the last fire's job has not ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Drop the fire.
    #[default]
    Skip,
    /// Hold the fire until the last job ends, then submit it.
    Queue,
    /// Cancel the last job, then submit the fire.
    CancelPrevious,
}

/// A bundle's `schedule:` (the bundle is implied) or the body of
/// `POST /v1/schedules` (with `bundle`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// Five fields (minute hour day month weekday) or six with seconds
    /// first; `L`, `W`, `#` and names (`MON`, `JAN`) as in Vixie cron.
    pub cron: String,
    /// The IANA time zone the cron is read in (default `UTC`); fires follow
    /// its daylight saving time.
    #[serde(default = "utc")]
    #[schemars(schema_with = "time_zones")]
    pub timezone: String,
    /// Each fire's job input.
    #[serde(default)]
    pub input: String,
    /// Each fire's job variables.
    #[serde(default)]
    #[schemars(with = "std::collections::BTreeMap<String, Value>")]
    pub variables: Map<String, Value>,
    /// Each fire's job priority.
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub missed: Missed,
    #[serde(default)]
    pub overlap: Overlap,
    /// The most missed fires `missed: run_all` submits (default 10).
    #[serde(default = "default_catch_up")]
    #[schemars(range(min = 1, max = MAX_CATCH_UP))]
    pub max_catch_up: u32,
}

fn utc() -> String {
    "UTC".into()
}

/// `timezone` in the API document: the IANA names [`ScheduleSpec::compile`]
/// takes, those of the time zone database the daemon carries.
fn time_zones(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names: Vec<&str> = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()).collect();
    schemars::json_schema!({
        "description": "The IANA time zone the cron is read in; fires follow its daylight saving time",
        "type": "string",
        "enum": names,
        "default": "UTC"
    })
}

fn default_catch_up() -> u32 {
    10
}

/// A schedule's spec as the queue stores it: with its bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    pub bundle: String,
    pub spec: ScheduleSpec,
}

impl ScheduleSpec {
    /// The cron and the time zone, checked.
    pub fn compile(&self) -> Result<(Cron, Tz), ScheduleError> {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(&self.cron)
            .map_err(|e| ScheduleError::Cron {
                cron: self.cron.clone(),
                detail: e.to_string(),
            })?;
        let tz = Tz::from_str(&self.timezone)
            .map_err(|_| ScheduleError::TimeZone(self.timezone.clone()))?;
        if !(1..=MAX_CATCH_UP).contains(&self.max_catch_up) {
            return Err(ScheduleError::CatchUp(self.max_catch_up));
        }
        let compiled = (cron, tz);
        if next_after(&compiled, Utc::now().timestamp_millis()).is_none() {
            return Err(ScheduleError::Never(self.cron.clone()));
        }
        Ok(compiled)
    }
}

/// The first fire strictly after `after_ms` (ms since the epoch), `None`
/// when the cron never fires again.
pub fn next_after((cron, tz): &(Cron, Tz), after_ms: i64) -> Option<i64> {
    let after: DateTime<Tz> = tz.timestamp_millis_opt(after_ms).single()?;
    cron.find_next_occurrence(&after, false)
        .ok()
        .map(|t| t.timestamp_millis())
}

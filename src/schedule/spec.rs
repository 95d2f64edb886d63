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
    #[error("schedule.cron: {0:?} never fires (before `until`, if it has one)")]
    Never(String),
    #[error("schedule.until: {0:?} is not a time; write RFC 3339, e.g. \"2027-01-01T00:00:00Z\"")]
    Until(String),
    #[error(
        "schedule.conversation: {0:?} is not a conversation id; use 1 to 128 letters, digits, `-`, `_`, `.` or `:`"
    )]
    Conversation(String),
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
    /// No fire after this time (RFC 3339); none: the cron goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<chrono::DateTime<Utc>>")]
    pub until: Option<String>,
    /// Each fire's job continues this conversation of the schedule's key
    /// (a LangGraph thread's cron); none: each fire's job is a
    /// conversation of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::types::text::ID_PATTERN))]
    pub conversation: Option<String>,
    /// Each fire's job's webhook (within `egress.allow`, checked at every
    /// fire as every job's is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
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
    /// What a LangGraph client sent with its cron (its metadata, the
    /// assistant, the run's settings: `api/langgraph/crons.rs`), kept with
    /// each fire's job as its run's (`jobs.run_meta`); none for every
    /// other schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_meta: Option<Value>,
}

/// A spec's cron, its time zone and its end, checked: what says when it
/// fires.
#[derive(Debug, Clone)]
pub struct Compiled {
    cron: Cron,
    tz: Tz,
    /// No fire after this (ms since the epoch).
    until: Option<i64>,
}

impl ScheduleSpec {
    /// A spec of `cron` with every other field at its default (UTC, no
    /// input, `missed: skip`, `overlap: skip`, …).
    pub fn new(cron: String) -> Self {
        Self {
            cron,
            timezone: utc(),
            input: String::new(),
            variables: Map::new(),
            priority: 0,
            missed: Missed::default(),
            overlap: Overlap::default(),
            max_catch_up: default_catch_up(),
            until: None,
            conversation: None,
            webhook: None,
        }
    }

    /// The cron, the time zone and the end, checked.
    pub fn compile(&self) -> Result<Compiled, ScheduleError> {
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
        let until = match &self.until {
            Some(until) => Some(
                DateTime::parse_from_rfc3339(until)
                    .map_err(|_| ScheduleError::Until(until.clone()))?
                    .timestamp_millis(),
            ),
            None => None,
        };
        if let Some(id) = &self.conversation
            && !crate::types::text::is_id(id)
        {
            return Err(ScheduleError::Conversation(id.clone()));
        }
        let compiled = Compiled { cron, tz, until };
        if next_after(&compiled, Utc::now().timestamp_millis()).is_none() {
            return Err(ScheduleError::Never(self.cron.clone()));
        }
        Ok(compiled)
    }
}

/// The first fire strictly after `after_ms` (ms since the epoch), `None`
/// when the cron never fires again (or not before its `until`).
pub fn next_after(compiled: &Compiled, after_ms: i64) -> Option<i64> {
    let after: DateTime<Tz> = compiled.tz.timestamp_millis_opt(after_ms).single()?;
    compiled
        .cron
        .find_next_occurrence(&after, false)
        .ok()
        .map(|t| t.timestamp_millis())
        .filter(|fire| compiled.until.is_none_or(|until| *fire <= until))
}

/// The fire at or before (`inclusive`) or strictly before `ms`, never one
/// after the spec's `until`.
pub fn at_or_before(compiled: &Compiled, ms: i64, inclusive: bool) -> Option<i64> {
    let (ms, inclusive) = match compiled.until {
        Some(until) if until < ms => (until, true),
        _ => (ms, inclusive),
    };
    let at: DateTime<Tz> = compiled.tz.timestamp_millis_opt(ms).single()?;
    compiled
        .cron
        .find_previous_occurrence(&at, inclusive)
        .ok()
        .map(|t| t.timestamp_millis())
}

//! Which `stream_mode`s a client asked for: read from a run's body, its
//! kept settings or a joined stream's query (a name or a list of names;
//! `values` when none is), an unknown one refused by name; and whether it
//! asked for its subgraphs too (`stream_subgraphs`).

use serde_json::Value;

use super::super::error::{ApiError, ErrorCode};

/// What a client asked to be streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Values,
    Updates,
    Messages,
    MessagesTuple,
    Events,
    Custom,
    Debug,
    Checkpoints,
    Tasks,
    /// The starts and ends of nested runs, and how a run ended — for the
    /// Agent Protocol's `lifecycle` channel; no client names it.
    Lifecycle,
}

impl Mode {
    const NAMES: [(&str, Mode); 9] = [
        ("values", Mode::Values),
        ("updates", Mode::Updates),
        ("messages", Mode::Messages),
        ("messages-tuple", Mode::MessagesTuple),
        ("events", Mode::Events),
        ("custom", Mode::Custom),
        ("debug", Mode::Debug),
        ("checkpoints", Mode::Checkpoints),
        ("tasks", Mode::Tasks),
    ];

    /// Every name a client may send.
    pub fn names() -> impl Iterator<Item = &'static str> {
        Self::NAMES.iter().map(|(name, _)| *name)
    }

    fn named(name: &str) -> Option<Mode> {
        Self::NAMES
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, mode)| *mode)
    }
}

/// The modes of one stream (`values` when none is asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Modes(Vec<Mode>);

/// `values` alone, as LangGraph streams when no mode is asked.
impl Default for Modes {
    fn default() -> Self {
        Self(vec![Mode::Values])
    }
}

impl Modes {
    /// Reads `stream_mode` as sent: absent, one name, or several (an empty
    /// name, as a client sends for "none", is left out). An unknown name is
    /// a 422 naming the ones served.
    pub fn read<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Self, ApiError> {
        let mut modes = Vec::new();
        for name in names.into_iter().filter(|name| !name.is_empty()) {
            let mode = Mode::named(name).ok_or_else(|| {
                ApiError::field(
                    ErrorCode::InvalidRequest,
                    "stream_mode",
                    format!(
                        "stream_mode {name:?} is not served: send any of {}",
                        Mode::names().collect::<Vec<_>>().join(", ")
                    ),
                )
            })?;
            if !modes.contains(&mode) {
                modes.push(mode);
            }
        }
        if modes.is_empty() {
            return Ok(Self::default());
        }
        Ok(Self(modes))
    }

    /// Reads `stream_mode` from a run's body or its kept settings: a name
    /// or a list of names.
    pub fn of_value(value: Option<&Value>) -> Result<Self, ApiError> {
        let names: Vec<&str> = match value {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(name)) => vec![name.as_str()],
            Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
            Some(other) => {
                return Err(ApiError::field(
                    ErrorCode::InvalidRequest,
                    "stream_mode",
                    format!("stream_mode {other} is not a mode's name or a list of them"),
                ));
            }
        };
        Self::read(names)
    }

    pub fn has(&self, mode: Mode) -> bool {
        self.0.contains(&mode)
    }

    /// These modes and `mode`.
    pub fn with(mut self, mode: Mode) -> Self {
        if !self.has(mode) {
            self.0.push(mode);
        }
        self
    }
}

/// Whether `stream_subgraphs` (as a run's body or its kept settings sent
/// it) asks for the nested runs' events: `true`; `false` or absent does
/// not; anything else is a 422.
pub(super) fn subgraphs_asked(value: Option<&Value>) -> Result<bool, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(asked)) => Ok(*asked),
        Some(other) => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "stream_subgraphs",
            format!("stream_subgraphs {other} is not true or false"),
        )),
    }
}

/// The schema of a `stream_mode` parameter: a mode's name, or a list of
/// them; `""` is none (what LangGraph's Python client sends for none).
pub(super) fn names_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names: Vec<&str> = std::iter::once("").chain(Mode::names()).collect();
    schemars::json_schema!({
        "anyOf": [
            {"type": "string", "enum": names},
            {"type": "array", "items": {"type": "string", "enum": names}},
        ],
    })
}

//! The multi-agent runtime's `agents.json` (`[runtime] agents_file`, by
//! default `agents.json` beside the config file when present): its remote
//! agents join `[[agents]]`. The file is what that runtime read —
//! `{"agents": [...]}` or the bare list, each agent `{id, name,
//! description, capabilities, endpoint}` and optionally
//! `conversation_starters`, `max_response_bytes`, `message_type` and
//! `timeout` (as in `[[agents]]`); keys the daemon has no use for (that
//! runtime's own extras) are ignored.

use std::path::Path;

use serde::Deserialize;

use super::{Config, ConfigError, locate};
use crate::duration::HumanDuration;
use crate::tools::http_agent::{HttpAgentSpec, MessageType};

/// The largest agents file read.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Deserialize)]
#[serde(untagged)]
enum AgentsFile {
    Wrapped { agents: Vec<FileAgent> },
    Bare(Vec<FileAgent>),
}

/// One agent as the file describes it.
#[derive(Deserialize)]
struct FileAgent {
    id: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    capabilities: Vec<String>,
    endpoint: String,
    #[serde(default)]
    conversation_starters: Vec<String>,
    #[serde(default)]
    max_response_bytes: Option<usize>,
    #[serde(default)]
    message_type: Option<MessageType>,
    #[serde(default)]
    timeout: Option<HumanDuration>,
}

/// The file read when `agents_file` is unset, beside the config file (the
/// multi-agent runtime read `agents.json` by default).
pub const DEFAULT_FILE: &str = "agents.json";

/// The agents file to read: `agents_file` when set, else
/// [`DEFAULT_FILE`] beside the config file when it exists (no config
/// file, no default: the embedded defaults name no directory).
fn path_of(config: &Config, config_file: Option<&Path>) -> Option<std::path::PathBuf> {
    if let Some(path) = &config.runtime.agents_file {
        return Some(path.clone());
    }
    let dir = config_file?.parent().unwrap_or(Path::new("."));
    Some(dir.join(DEFAULT_FILE)).filter(|path| path.is_file())
}

/// Adds the agents of the agents file ([`path_of`]) to `config.agents`; an
/// unreadable or malformed file, or an id both define, is an error naming
/// the file (and the id).
pub(super) fn merge(config: &mut Config, config_file: Option<&Path>) -> Result<(), ConfigError> {
    let Some(path) = path_of(config, config_file) else {
        return Ok(());
    };
    let invalid = |message: String| locate::invalid(config_file, "runtime.agents_file", message);
    let agents = read(&path).map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    for agent in agents {
        if agent.id.trim().is_empty() || agent.endpoint.trim().is_empty() {
            return Err(invalid(format!(
                "{}: every agent needs a non-empty `id` and `endpoint`",
                path.display()
            )));
        }
        if config.agents.iter().any(|a| a.id == agent.id) {
            return Err(invalid(format!(
                "{}: agent {:?} is defined twice (here, and in [[agents]] or earlier in the file); keep one",
                path.display(),
                agent.id
            )));
        }
        let spec = HttpAgentSpec {
            name: agent.name.unwrap_or_else(|| agent.id.clone()),
            id: agent.id,
            description: agent.description,
            capabilities: agent.capabilities,
            endpoint: agent.endpoint,
            conversation_starters: agent.conversation_starters,
            max_response_bytes: agent.max_response_bytes,
            message_type: agent.message_type,
            timeout: agent.timeout,
        };
        if let Some((key, message)) = spec.problem() {
            return Err(invalid(format!(
                "{}: agent {:?}: `{key}` {message}",
                path.display(),
                spec.id
            )));
        }
        config.agents.push(spec);
    }
    Ok(())
}

/// Why the agents file could not be read. Where: [`merge`] prefixes the
/// file's path and the `runtime.agents_file` key.
#[derive(Debug, thiserror::Error)]
enum AgentsFileError {
    #[error("cannot read: {0}")]
    Unreadable(#[from] std::io::Error),
    #[error("is {size} bytes; an agents file holds at most {}", MAX_FILE_BYTES)]
    TooLarge { size: u64 },
    #[error(
        "not an agents file ({{\"agents\": [{{\"id\", \"name\", \"description\", \"capabilities\", \"endpoint\"}}]}} or the bare list): {detail}"
    )]
    NotAgentsFile { detail: String },
}

fn read(path: &Path) -> Result<Vec<FileAgent>, AgentsFileError> {
    let size = std::fs::metadata(path)?.len();
    if size > MAX_FILE_BYTES {
        return Err(AgentsFileError::TooLarge { size });
    }
    let text = std::fs::read_to_string(path)?;
    match serde_json::from_str::<AgentsFile>(&text) {
        Ok(AgentsFile::Wrapped { agents } | AgentsFile::Bare(agents)) => Ok(agents),
        Err(_) => {
            // The untagged error says nothing useful; the wrapped form's does.
            let detail = serde_json::from_str::<serde_json::Value>(&text)
                .map_err(|e| e.to_string())
                .and_then(|value| {
                    let list = value.get("agents").cloned().unwrap_or(value);
                    serde_json::from_value::<Vec<FileAgent>>(list)
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                })
                .err()
                .unwrap_or_default();
            Err(AgentsFileError::NotAgentsFile { detail })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_with(file_text: &str) -> (tempfile::TempDir, Config) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agents.json");
        std::fs::write(&path, file_text).unwrap();
        let mut config = Config::default();
        config.runtime.agents_file = Some(path);
        (dir, config)
    }

    #[test]
    fn the_runtimes_agents_json_joins_the_config_agents() {
        let (_dir, mut config) = config_with(
            r#"{"agents": [{"id": "weather", "name": "Weather", "description": "Forecasts",
                "capabilities": ["forecast"], "endpoint": "http://127.0.0.1:9/message", "color": "blue"}]}"#,
        );
        merge(&mut config, None).unwrap();
        assert_eq!(config.agents.len(), 1);
        let agent = &config.agents[0];
        assert_eq!(
            (
                agent.id.as_str(),
                agent.name.as_str(),
                agent.endpoint.as_str()
            ),
            ("weather", "Weather", "http://127.0.0.1:9/message")
        );
        assert_eq!(agent.capabilities, ["forecast"]);
    }

    #[test]
    fn agents_json_beside_the_config_file_is_read_by_default() {
        let dir = tempfile::tempdir().unwrap();
        let config_file = dir.path().join("config.toml");
        let mut config = Config::default();
        merge(&mut config, Some(&config_file)).unwrap();
        assert!(config.agents.is_empty(), "no agents.json: no agents");
        std::fs::write(
            dir.path().join(DEFAULT_FILE),
            r#"[{"id": "news", "endpoint": "http://127.0.0.1:9/m"}]"#,
        )
        .unwrap();
        merge(&mut config, Some(&config_file)).unwrap();
        assert_eq!(config.agents[0].id, "news");
        // `agents_file` names another file, which replaces the default.
        let (_other, mut config) = config_with(r#"[{"id": "other", "endpoint": "http://x/m"}]"#);
        merge(&mut config, Some(&config_file)).unwrap();
        let ids: Vec<&str> = config.agents.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["other"]);
        // Without a config file (the embedded defaults) nothing is read.
        let mut config = Config::default();
        merge(&mut config, None).unwrap();
        assert!(config.agents.is_empty());
    }

    #[test]
    fn a_bare_list_is_read_and_a_duplicate_id_is_refused() {
        let (_dir, mut config) = config_with(
            r#"[{"id": "a", "endpoint": "http://x/m"}, {"id": "a", "endpoint": "http://y/m"}]"#,
        );
        let err = merge(&mut config, None).unwrap_err().to_string();
        assert!(
            err.contains("runtime.agents_file") && err.contains("\"a\" is defined twice"),
            "{err}"
        );
    }

    #[test]
    fn an_agents_message_type_and_timeout_are_read_and_checked() {
        let (_dir, mut config) = config_with(
            r#"[{"id": "goodbye", "endpoint": "http://x/m", "message_type": 0, "timeout": "90s"}]"#,
        );
        merge(&mut config, None).unwrap();
        let agent = &config.agents[0];
        assert_eq!(agent.message_type(), MessageType::Number(0));
        assert_eq!(agent.timeout(), std::time::Duration::from_secs(90));
        let (_dir, mut config) =
            config_with(r#"[{"id": "slow", "endpoint": "http://x/m", "timeout": "3h"}]"#);
        let err = merge(&mut config, None).unwrap_err().to_string();
        assert!(
            err.contains("runtime.agents_file")
                && err.contains("agent \"slow\": `timeout`")
                && err.contains("at most \"1h\""),
            "{err}"
        );
        let (_dir, mut config) =
            config_with(r#"[{"id": "slow", "endpoint": "http://x/m", "timeout": "soon"}]"#);
        let err = merge(&mut config, None).unwrap_err().to_string();
        assert!(err.contains("invalid duration \"soon\""), "{err}");
    }

    #[test]
    fn a_malformed_file_names_the_problem() {
        let (_dir, mut config) = config_with(r#"{"agents": [{"id": "a"}]}"#);
        let err = merge(&mut config, None).unwrap_err().to_string();
        assert!(
            err.contains("agents.json") && err.contains("endpoint"),
            "{err}"
        );
    }
}

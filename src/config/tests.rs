//! Tests of `config`.

use super::*;

/// Loads `text` as a config file → the error message.
fn load_error(text: &str) -> (String, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, text).unwrap();
    let err = Config::load(Some(&file)).unwrap_err().to_string();
    (err, file, dir)
}

#[test]
fn an_egress_entry_that_is_not_a_url_is_refused_with_its_index() {
    let (err, file, _dir) =
        load_error("[egress]\nallow = [\"https://agents.example/\", \"agents.example\"]\n");
    assert!(
        err.starts_with(&file.display().to_string())
            && err.contains("egress.allow")
            && err.contains("egress.allow[1] \"agents.example\""),
        "{err}"
    );
}

#[test]
fn a_lease_below_one_second_is_refused_with_file_line_and_key() {
    let (err, file, _dir) = load_error(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[queue]\nworkers = 2\nlease = \"500ms\"\n",
    );
    assert!(
        err.starts_with(&format!("{}:6: queue.lease: ", file.display())),
        "{err}"
    );
    assert!(err.contains("1s"), "{err}");
    let (err, _, _dir) = load_error("[queue]\nlease = \"0s\"\n");
    assert!(err.contains("queue.lease"), "{err}");
}

#[test]
fn a_zero_poll_interval_is_refused_with_file_line_and_key() {
    let (err, file, _dir) = load_error("[queue]\nlease = \"1s\"\npoll_interval = \"0ms\"\n");
    assert!(
        err.starts_with(&format!("{}:3: queue.poll_interval: ", file.display())),
        "{err}"
    );
}

#[test]
fn postgres_settings_load_and_need_a_url() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(
            &file,
            "[queue]\nbackend = \"postgres\"\nurl = \"postgres://sa@db/jobs\"\npassword_env = \"SA_DB_PASSWORD\"\nschema = \"agents\"\n",
        )
        .unwrap();
    let config = Config::load(Some(&file)).unwrap();
    assert_eq!(config.queue.backend, QueueBackend::Postgres);
    assert_eq!(config.queue.url.as_deref(), Some("postgres://sa@db/jobs"));
    assert_eq!(config.queue.password_env.as_deref(), Some("SA_DB_PASSWORD"));
    assert_eq!(
        (config.queue.schema.as_str(), config.queue.pool_size),
        ("agents", default_pool_size())
    );
    let (err, file, _dir) = load_error("[queue]\nbackend = \"postgres\"\n");
    assert!(
        err.starts_with(&format!("{}:1: queue.url: ", file.display()))
            && err.contains("postgres://"),
        "{err}"
    );
    let (err, _, _dir) =
        load_error("[queue]\nbackend = \"postgres\"\nurl = \"postgres://h/d\"\npool_size = 0\n");
    assert!(err.contains("queue.pool_size"), "{err}");
}

/// An `[[agents]]` entry's envelope `type` is "Text" unless
/// `message_type` names another (a string or a number), and its timeout
/// through the directory is the multi-agent runtime's 300 s unless
/// `timeout` says otherwise — above zero and at most an hour.
#[test]
fn an_agents_message_type_and_timeout_load_and_are_bounded() {
    use crate::tools::http_agent::{DEFAULT_AGENT_TIMEOUT, MessageType};
    let agent = |more: &str| {
        format!(
            "[[agents]]\nid = \"slow\"\nname = \"Slow\"\nendpoint = \"http://127.0.0.1:9/m\"\n{more}"
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, agent("")).unwrap();
    let plain = Config::load(Some(&file)).unwrap().agents.remove(0);
    assert_eq!(plain.message_type(), MessageType::Name("Text".into()));
    assert_eq!(plain.timeout(), DEFAULT_AGENT_TIMEOUT);
    assert_eq!(DEFAULT_AGENT_TIMEOUT, std::time::Duration::from_secs(300));
    std::fs::write(&file, agent("message_type = 0\ntimeout = \"10m\"\n")).unwrap();
    let set = Config::load(Some(&file)).unwrap().agents.remove(0);
    assert_eq!(set.message_type(), MessageType::Number(0));
    assert_eq!(set.timeout(), std::time::Duration::from_secs(600));
    std::fs::write(&file, agent("message_type = \"Greeting\"\n")).unwrap();
    let named = Config::load(Some(&file)).unwrap().agents.remove(0);
    assert_eq!(named.message_type(), MessageType::Name("Greeting".into()));
    for (more, key, hint) in [
        (
            "timeout = \"2h\"\n",
            "agents.slow.timeout",
            "at most \"1h\"",
        ),
        ("timeout = \"0s\"\n", "agents.slow.timeout", "above zero"),
        (
            "message_type = \" \"\n",
            "agents.slow.message_type",
            "is empty",
        ),
    ] {
        let (err, _, _dir) = load_error(&agent(more));
        assert!(err.contains(key) && err.contains(hint), "{more}: {err}");
    }
}

#[test]
fn the_shortest_accepted_values_load() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, "[queue]\nlease = \"1s\"\npoll_interval = \"1ms\"\n").unwrap();
    let config = Config::load(Some(&file)).unwrap();
    assert_eq!(std::time::Duration::from(config.queue.lease), MIN_LEASE);
}

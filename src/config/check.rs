//! What a loaded config must hold before the daemon starts: each section's
//! rules (caps above zero, a lease long enough to heartbeat, a PostgreSQL
//! url when that store is chosen, an endpoint's required keys), each
//! refusal naming its key and the default to go back to.

use std::path::Path;

use super::{
    Config, ConfigError, EndpointKind, FAIR_SHARE, LoadConfig, MIN_LEASE, QueueBackend, locate,
};

/// A setting that cannot work: its key path and what is wrong.
type Problem = (String, String);

fn bad(key: &str, message: String) -> Problem {
    (key.to_string(), message)
}
impl Config {
    pub(super) fn validate(&self, file: Option<&Path>) -> Result<(), ConfigError> {
        self.check_server()
            .and_then(|()| self.check_queue())
            .and_then(|()| self.check_endpoints())
            .and_then(|()| {
                // The entry's index is in the message; the key is the list.
                self.egress
                    .policy()
                    .map(drop)
                    .map_err(|e| bad("egress.allow", e.to_string()))
            })
            .map_err(|(key, message)| locate::invalid(file, &key, message))
    }

    /// The API server's caps and timeouts.
    fn check_server(&self) -> Result<(), Problem> {
        if self.server.mcp.max_sessions == 0 {
            return Err(bad(
                "server.mcp.max_sessions",
                "must be at least 1 (the default is 64)".into(),
            ));
        }
        if std::time::Duration::from(self.server.mcp.session_idle).is_zero() {
            return Err(bad(
                "server.mcp.session_idle",
                "must be longer than zero (the default is \"10m\")".into(),
            ));
        }
        let server = &self.server;
        for (key, value, default) in [
            ("server.max_connections", server.max_connections, 4096),
            ("server.max_event_streams", server.max_event_streams, 2048),
            (
                "server.max_event_streams_per_caller",
                server.streams_per_caller(),
                2048 / FAIR_SHARE,
            ),
            ("server.max_schedules", server.max_schedules, 1000),
            (
                "server.max_schedules_per_key",
                server.schedules_per_key(),
                1000 / FAIR_SHARE,
            ),
        ] {
            if value == 0 {
                return Err(bad(
                    key,
                    format!("must be at least 1 (the default is {default})"),
                ));
            }
        }
        if server.max_connections > u32::MAX as usize {
            return Err(bad(
                "server.max_connections",
                format!("must be at most {} (the default is 4096)", u32::MAX),
            ));
        }
        for (key, value, default) in [
            ("server.header_timeout", server.header_timeout, "10s"),
            ("server.body_timeout", server.body_timeout, "30s"),
            ("server.idle_timeout", server.idle_timeout, "5s"),
        ] {
            if std::time::Duration::from(value).is_zero() {
                return Err(bad(
                    key,
                    format!("must be longer than zero (the default is \"{default}\")"),
                ));
            }
        }
        Ok(())
    }

    /// The queue's workers, attempts, retention, lease, polling and store.
    fn check_queue(&self) -> Result<(), Problem> {
        if self.queue.workers == 0 {
            return Err(bad("queue.workers", "must be at least 1".into()));
        }
        if self.queue.max_attempts == 0 {
            return Err(bad("queue.max_attempts", "must be at least 1".into()));
        }
        if std::time::Duration::from(self.queue.retention) < std::time::Duration::from_secs(60) {
            return Err(bad(
                "queue.retention",
                "must be at least \"1m\" (the default is \"7d\")".into(),
            ));
        }
        // Heartbeats go out every third of the lease (`heartbeat_every`); below a second they
        // would hammer the store and a brief stall would expire a healthy run.
        let lease: std::time::Duration = self.queue.lease.into();
        if lease < MIN_LEASE {
            return Err(bad(
                "queue.lease",
                format!(
                    "\"{}\" is too short; use at least \"1s\" (the default is \"30s\")",
                    self.queue.lease
                ),
            ));
        }
        // Zero would make idle workers poll the store in a busy loop.
        let poll: std::time::Duration = self.queue.poll_interval.into();
        if poll.is_zero() {
            return Err(bad(
                "queue.poll_interval",
                "must be above zero (the default is \"250ms\")".into(),
            ));
        }
        if self.queue.backend == QueueBackend::Postgres {
            if self
                .queue
                .url
                .as_deref()
                .is_none_or(|u| u.trim().is_empty())
            {
                return Err(bad(
                    "queue.url",
                    "backend \"postgres\" needs a url: add url = \"postgres://USER@HOST:PORT/DATABASE\" under [queue] (the password goes in the variable named by queue.password_env)".into(),
                ));
            }
            if self.queue.pool_size == 0 {
                return Err(bad(
                    "queue.pool_size",
                    "must be at least 1 (the default is 4 per CPU core, 8 to 32)".into(),
                ));
            }
        }
        Ok(())
    }

    /// Each model endpoint's and remote agent's settings.
    fn check_endpoints(&self) -> Result<(), Problem> {
        for (name, ep) in &self.endpoints {
            match ep.kind {
                EndpointKind::Http if ep.base_url.is_none() => {
                    return Err(bad(
                        &format!("endpoints.{name}.base_url"),
                        "an http endpoint needs base_url (…/v1)".into(),
                    ));
                }
                EndpointKind::Scripted if ep.script.is_none() => {
                    return Err(bad(
                        &format!("endpoints.{name}.script"),
                        "a scripted endpoint needs script".into(),
                    ));
                }
                _ => {}
            }
            if ep.max_response_bytes == 0 {
                return Err(bad(
                    &format!("endpoints.{name}.max_response_bytes"),
                    "must be at least 1 (the default is 8388608, 8 MiB)".into(),
                ));
            }
            if ep.max_concurrent == 0 {
                return Err(bad(
                    &format!("endpoints.{name}.max_concurrent"),
                    "must be at least 1".into(),
                ));
            }
            if let Some((key, message)) = ep.load.as_ref().and_then(LoadConfig::problem) {
                return Err(bad(&format!("endpoints.{name}.load.{key}"), message));
            }
        }
        for agent in &self.agents {
            if let Some((key, message)) = agent.problem() {
                return Err(bad(&format!("agents.{}.{key}", agent.id), message));
            }
        }
        Ok(())
    }
}

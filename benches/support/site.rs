//! A benchmark's site directory as every benchmark writes it: the
//! directories, `config.toml` (the same server, paths, queue and endpoint
//! settings, with what a benchmark adds), a one-turn bundle, and the mock
//! model server the daemon calls. Shared so each benchmark measures the
//! same daemon.
#![allow(dead_code)]

use std::path::Path;

use structured_agents::mock::{MockServer, Script};

/// What a site's `config.toml` says beyond what every site says.
pub struct Config<'a> {
    /// The mock model server's base URL.
    pub endpoint: &'a str,
    /// `queue.workers`, and the endpoint's `max_concurrent`.
    pub workers: usize,
    /// `endpoints.mock.request_timeout`.
    pub request_timeout: &'a str,
    /// Lines under `[server]`, after `listen`.
    pub server: &'a str,
    /// Lines under `[queue]`, after the worker count, poll and lease.
    pub queue: &'a str,
    /// Lines under `[endpoints.mock]`, after its URL and limits.
    pub mock: &'a str,
    /// Whole sections after the rest (`[auth]`, `[endpoints.mock.load]`).
    pub sections: &'a str,
}

impl<'a> Config<'a> {
    /// `workers` workers calling the mock at `endpoint`, a request taking
    /// at most 600 s, and nothing else.
    pub fn new(endpoint: &'a str, workers: usize) -> Self {
        Self {
            endpoint,
            workers,
            request_timeout: "600s",
            server: "",
            queue: "",
            mock: "",
            sections: "",
        }
    }
}

/// Writes the site's directories and `config.toml` under `dir`.
pub fn write_site(dir: &Path, c: &Config<'_>) {
    for sub in ["bundles", "models", "plugins", "state"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let (endpoint, workers, timeout) = (c.endpoint, c.workers, c.request_timeout);
    std::fs::write(
        dir.join("config.toml"),
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n{}\
             [paths]\nbundles_dir = \"bundles\"\nmodels_dir = \"models\"\nplugins_dir = \"plugins\"\nstate_dir = \"state\"\n\
             [queue]\nworkers = {workers}\npoll_interval = \"100ms\"\nlease = \"120s\"\n{}\
             [endpoints.mock]\nbase_url = \"{endpoint}\"\nmax_concurrent = {workers}\nrequest_timeout = \"{timeout}\"\n{}{}",
            c.server, c.queue, c.mock, c.sections
        ),
    )
    .unwrap();
}

/// A bundle of one model turn named `name`, its prompt the job's input.
pub fn one_turn(name: &str) -> String {
    format!(
        "name: {name}\nversion: \"1\"\nmodel: {{endpoint: mock, name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n"
    )
}

/// Writes bundles/<name>/bundle.yaml under the site `dir`.
pub fn put_bundle(dir: &Path, name: &str, yaml: &str) {
    let bundle_dir = dir.join("bundles").join(name);
    std::fs::create_dir_all(&bundle_dir).unwrap();
    std::fs::write(bundle_dir.join("bundle.yaml"), yaml).unwrap();
}

/// A mock model server playing `script`, not recording requests (a
/// benchmark's thousands of requests would only cost memory).
pub async fn mock(script: &str) -> MockServer {
    MockServer::start_on(
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        Script::parse(script, "bench").unwrap(),
        false,
    )
    .await
    .unwrap()
}

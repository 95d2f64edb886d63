//! No route can forget its action: every `.route(…)` the API's router is
//! built from (every file under `src/api/`) declares the authorization
//! policy's action with `with(Action, …)`, except the few listed here, each
//! with the reason it needs none. A new route without an action fails this
//! test; so does an exception whose route is gone. The action names are
//! checked against `access::policy::Action` (every one is documented in
//! docs/security.md's table).

use std::collections::BTreeMap;
use std::fs;

/// Routes without a declared action, and why.
const UNDECLARED: [(&str, &str); 15] = [
    (
        "/whoami",
        "authenticated; answers only the presented key: its name, scopes and what the policy lets it do",
    ),
    (
        "/ui",
        "the console's static shell: no data; the page calls the API with a key",
    ),
    ("/ui/", "the console's static shell"),
    ("/ui/{*path}", "the console's static scripts and styles"),
    (
        "/.well-known/agent-card.json",
        "the A2A card: lists only the bundles the presented key may call or read (submit_job, read_bundle)",
    ),
    (
        "/a2a/.well-known/agent-card.json",
        "the A2A card again, beside its interface /a2a: as /.well-known/agent-card.json",
    ),
    (
        "/a2a/{bundle}/.well-known/agent-card.json",
        "a bundle's A2A card: shown only to a key that may call or read the bundle",
    ),
    (
        "/a2a",
        "A2A JSON-RPC: authenticated; each method asks the policy for its own action",
    ),
    (
        "/a2a/{bundle}",
        "A2A JSON-RPC: authenticated; each method asks the policy for its own action",
    ),
    (
        "/a2a/",
        "A2A JSON-RPC with the slash the A2A TCK appends: as /a2a",
    ),
    (
        "/a2a/{bundle}/",
        "A2A JSON-RPC with a trailing slash: as /a2a/{bundle}",
    ),
    ("/v1/openapi.json", "the API document: reveals nothing"),
    ("/healthz", "liveness: reveals nothing"),
    ("/readyz", "readiness: reveals nothing"),
    ("/metrics", "Prometheus: on the operator's scrape address"),
];

#[path = "common/routes.rs"]
mod routes;

use routes::{root, routes};

/// Where `with(` declares an action in a route's text: `with(` alone,
/// not aide's `get_with(` and its kin.
fn actions_at(text: &str) -> impl Iterator<Item = usize> + '_ {
    text.match_indices("with(")
        .map(|(at, _)| at)
        .filter(|at| !text[..*at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
}

#[test]
fn every_route_declares_its_action_or_is_a_listed_exception() {
    let routes = routes();
    assert!(
        routes.len() > 40,
        "the scan found too few routes: {routes:?}"
    );
    let exceptions: BTreeMap<&str, &str> = UNDECLARED.into_iter().collect();
    let mut missing = Vec::new();
    for (path, text, file) in &routes {
        let declared = actions_at(text).next().is_some();
        if !declared && !exceptions.contains_key(path.as_str()) {
            missing.push(format!("{file}: {path} ({text})"));
        }
    }
    assert!(
        missing.is_empty(),
        "these routes declare no action of the authorization policy: make them with `with(Action::…, …)` (src/api/mod.rs), or list them in UNDECLARED with the reason:\n{}",
        missing.join("\n")
    );
    for path in exceptions.keys() {
        assert!(
            routes.iter().any(|(p, _, _)| p == path),
            "UNDECLARED lists {path}, which no longer exists: take it off the list"
        );
    }
}

#[test]
fn every_declared_action_is_one_of_the_policy_and_in_the_security_table() {
    let policy = fs::read_to_string(root().join("src/access/policy.rs")).unwrap();
    let security = fs::read_to_string(root().join("docs/security.md")).unwrap();
    for (path, text, file) in routes() {
        for at in actions_at(&text) {
            let action: String = text[at + "with(".len()..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            assert!(
                policy.contains(&format!("Action::{action} =>")),
                "{file}: {path} declares {action:?}, not an action of the policy"
            );
            let snake: String = action
                .chars()
                .enumerate()
                .flat_map(|(i, c)| {
                    let lower = c.to_ascii_lowercase();
                    if c.is_ascii_uppercase() && i > 0 {
                        vec!['_', lower]
                    } else {
                        vec![lower]
                    }
                })
                .collect();
            assert!(
                security.contains(&format!("| `{snake}` |")),
                "docs/security.md's policy table lacks `{snake}` ({path})"
            );
        }
    }
}

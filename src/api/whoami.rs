//! `GET /v1/whoami`: the key a request presents — its name, scopes and
//! bundle globs — and what the authorization policy lets it do, action by
//! action (`access::grants`, which asks the policy itself). The console
//! reads it to say who is signed in and to offer only the actions the key
//! may take, each refused one with the scope it needs; it holds no copy of
//! the scope rules. Any key may ask (no scope is needed to learn one's
//! own), so the route declares no action.

use std::collections::BTreeMap;

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::Serialize;

use super::AppState;
use super::auth::Caller;
use crate::access::Scope;
use crate::access::grants::grants;

/// What `GET /v1/whoami` answers.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WhoAmI {
    /// The key's name: as in job owners and decisions (`local` when no key
    /// is configured, `token` for the single `server.token_file` token).
    name: String,
    /// Its scopes as the keys file gives them (`admin` has every other).
    scopes: Vec<String>,
    /// The globs of the bundles it may use; `null`: every bundle.
    bundles: Option<Vec<String>>,
    /// No key is configured: every request is `local`, with every scope
    /// (allowed only on a loopback address).
    open: bool,
    /// Every action of the authorization policy by name (docs/security.md
    /// has the table), with what this key may do.
    actions: BTreeMap<&'static str, ActionGrant>,
}

/// One action as the policy answers it for the key.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ActionGrant {
    /// The scope it needs at all.
    scope: &'static str,
    /// Whether the key may do it on its own objects, and where only the
    /// scope counts (the daemon, a bundle).
    own: bool,
    /// The fewest scopes that, added to the key's, would let it do so
    /// (empty when it may).
    own_needs: Vec<&'static str>,
    /// The scope that extends it to other keys' objects (jobs,
    /// conversations, schedules, deliveries) and to objects of no key (a
    /// bundle's own schedule, a job from before keys).
    others_scope: &'static str,
    /// Whether the key may do it on those.
    others: bool,
    /// The fewest scopes that, added to the key's, would let it.
    others_needs: Vec<&'static str>,
}

/// `GET /v1/whoami`.
pub async fn whoami(State(state): State<AppState>, caller: Caller) -> Json<WhoAmI> {
    let key = &caller.0;
    let actions = grants(key)
        .into_iter()
        .map(|g| {
            let names = |scopes: &[Scope]| -> Vec<&'static str> {
                scopes.iter().map(|s| s.as_str()).collect()
            };
            let grant = ActionGrant {
                scope: g.scope.as_str(),
                own: g.own,
                own_needs: names(&g.own_needs),
                others_scope: g.others_scope.as_str(),
                others: g.others,
                others_needs: names(&g.others_needs),
            };
            (g.action.as_str(), grant)
        })
        .collect();
    Json(WhoAmI {
        name: key.name.clone(),
        scopes: key.scopes().map(|s| s.as_str().to_string()).collect(),
        bundles: key.bundle_patterns.clone(),
        open: state.registry.snapshot().keys.is_open(),
        actions,
    })
}

/// `GET /v1/whoami` in the API document.
pub(super) fn whoami_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary("The key this request presents, and what it may do")
        .description(
            "Its name, scopes and bundle globs, and for every action of the authorization \
             policy the scope it needs, whether the key may do it on its own objects (`own`) \
             and on another key's (`others`, which needs `others_scope`), and when not, the \
             fewest scopes that would let it (`own_needs`, `others_needs`). Any key may ask.",
        )
        .response_with::<200, Json<WhoAmI>, _>(|r| r.description("The key"))
}

//! `/v1/keys`: list, make and revoke API keys over the API (the console's
//! keys page), `admin` only (`manage_keys`). A key is made and revoked
//! exactly as `structured-agents keys new/revoke` does it — the same
//! `access::file::KeysFile::add` and `revoke` on the file `[auth]
//! keys_file` names — and then the daemon reloads, so the change applies
//! at once. A change the reload rejects (the daemon would be left open on
//! the network without a key, say) is undone in the file and refused with
//! the reload's errors: the file never holds what the daemon does not
//! serve. A new key's token is in the answer once; only its SHA-256 is
//! stored.

use std::path::{Path as FsPath, PathBuf};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::Serialize;

use super::AppState;
use super::auth::Caller;
use super::body::{JsonBody, Path};
use super::error::{ApiError, ErrorCode};
use crate::access::Scope;
use crate::access::file::{KeyEntry, KeysFile, KeysFileError, NewKey};
use crate::budget::DailyLimits;
use crate::events::daemon::{ReloadResult, ReloadTrigger};

/// One change of the keys file at a time from the API (each reads the file,
/// changes it and reloads).
static CHANGING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A key as the API shows it: never its token, nor the token's hash.
#[derive(Debug, Serialize, JsonSchema)]
pub struct KeyView {
    name: String,
    scopes: Vec<Scope>,
    /// Globs of the bundles it may use; `null`: every bundle.
    bundles: Option<Vec<String>>,
    rate_per_minute: Option<u32>,
    max_in_flight: Option<u64>,
    max_priority: Option<i32>,
    per_day: Option<DailyLimits>,
    weight: Option<u32>,
    webhook: Option<String>,
    /// RFC 3339, when it was made (by `keys new` or this API).
    created_at: Option<String>,
}

impl From<KeyEntry> for KeyView {
    fn from(key: KeyEntry) -> Self {
        Self {
            name: key.name,
            scopes: key.scopes,
            bundles: key.bundles,
            rate_per_minute: key.rate_per_minute,
            max_in_flight: key.max_in_flight,
            max_priority: key.max_priority,
            per_day: key.per_day,
            weight: key.weight,
            webhook: key.webhook,
            created_at: key.created_at,
        }
    }
}

/// What `GET /v1/keys` answers.
#[derive(Debug, Serialize, JsonSchema)]
pub struct KeyList {
    /// The keys file (`[auth] keys_file`).
    file: PathBuf,
    keys: Vec<KeyView>,
    /// Every scope a key may have (`admin` has all the others).
    scopes: Vec<Scope>,
}

/// What `POST /v1/keys` answers.
#[derive(Debug, Serialize, JsonSchema)]
pub struct IssuedKey {
    key: KeyView,
    /// The key's token: shown only now (the daemon keeps its SHA-256).
    token: String,
    /// The snapshot generation that serves it.
    generation: u64,
}

/// What `DELETE /v1/keys/{name}` answers.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RevokedKey {
    key: KeyView,
    /// The snapshot generation that no longer knows it.
    generation: u64,
}

/// `GET /v1/keys`: the keys of the keys file.
pub async fn list(State(state): State<AppState>, _: Caller) -> Result<Json<KeyList>, ApiError> {
    let file = keys_file(&state)?;
    let keys = KeysFile::read_or_empty(&file).map_err(refused)?.keys;
    let keys = keys.into_iter().map(KeyView::from).collect();
    Ok(Json(KeyList {
        file,
        keys,
        scopes: Scope::ALL.to_vec(),
    }))
}

/// `POST /v1/keys`: a key made as `structured-agents keys new` makes it,
/// applied by a reload.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(key): JsonBody<NewKey>,
) -> Result<(StatusCode, Json<IssuedKey>), ApiError> {
    let file = keys_file(&state)?;
    let _one = CHANGING.lock().await;
    let before = KeysFile::read_or_empty(&file).map_err(refused)?;
    let issued = KeysFile::add(&file, key).map_err(refused)?;
    let generation = applied(&state, &file, &before).await?;
    tracing::info!(key = %issued.entry.name, by = caller.name(), "API key made over the API");
    let view = IssuedKey {
        key: issued.entry.into(),
        token: issued.token,
        generation,
    };
    Ok((StatusCode::CREATED, Json(view)))
}

/// `DELETE /v1/keys/{name}`: a key revoked as `structured-agents keys
/// revoke` does it, applied by a reload (its open streams end with it).
pub async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<RevokedKey>, ApiError> {
    let file = keys_file(&state)?;
    let _one = CHANGING.lock().await;
    let before = KeysFile::read(&file).map_err(refused)?;
    still_administered(&before, &name, caller.name())?;
    let revoked = KeysFile::revoke(&file, &name).map_err(refused)?;
    let generation = applied(&state, &file, &before).await?;
    tracing::info!(key = %name, by = caller.name(), "API key revoked over the API");
    Ok(Json(RevokedKey {
        key: revoked.into(),
        generation,
    }))
}

/// Refuses a revocation over the API that would lock its caller out (the
/// key revoking itself) or leave no `admin` key: a daemon whose keys file
/// empties takes requests without a key at all, and one without an admin
/// key can no longer manage its keys over the API. The CLI on the
/// daemon's host can still do either.
fn still_administered(file: &KeysFile, name: &str, caller: &str) -> Result<(), ApiError> {
    let refused = |why: &str| {
        Err(ApiError::field(
            ErrorCode::InvalidState,
            "name",
            format!(
                "key {name:?} {why}; revoke it with another admin key, or with `structured-agents keys revoke` on the daemon's host"
            ),
        ))
    };
    if name == caller {
        return refused(
            "is the key making this request: a key does not revoke itself over the API",
        );
    }
    let admins_left = file
        .keys
        .iter()
        .filter(|key| key.name != name && key.scopes.contains(&Scope::Admin))
        .count();
    if admins_left == 0 && file.keys.iter().any(|key| key.name == name) {
        return refused(
            "is the last key with the admin scope (without one, no key could manage the keys, and without any key the daemon takes requests from anyone)",
        );
    }
    Ok(())
}

/// The file `[auth] keys_file` names, or why there is none to manage.
fn keys_file(state: &AppState) -> Result<PathBuf, ApiError> {
    let config = &state.registry.snapshot().config;
    config.auth.keys_file.clone().ok_or_else(|| {
        ApiError::new(
            ErrorCode::InvalidState,
            "the daemon's config sets no `[auth] keys_file`, so it has no keys to manage: add `[auth]\nkeys_file = \"keys.toml\"` to the config and make the first key with `structured-agents keys new NAME --scopes admin`",
        )
    })
}

/// Reloads the daemon so the changed file applies; when the reload is
/// rejected, `before` is written back and the change refused with why.
async fn applied(state: &AppState, file: &FsPath, before: &KeysFile) -> Result<u64, ApiError> {
    let Some(outcome) = state.reloads.reload(ReloadTrigger::Api).await else {
        before.write(file).map_err(refused)?;
        return Err(ApiError::new(
            ErrorCode::Unavailable,
            "the daemon is shutting down; the keys file is as it was",
        ));
    };
    if outcome.result == ReloadResult::Rejected {
        before.write(file).map_err(refused)?;
        return Err(ApiError::new(
            ErrorCode::InvalidState,
            format!(
                "the daemon's reload rejected the change, so the keys file is as it was: {}",
                outcome.errors.join("; ")
            ),
        ));
    }
    Ok(outcome.generation)
}

/// A keys file refusal as the API answers it: a name taken is a 409, an
/// unknown one a 404, an unusable key a 422, the file itself a 500.
fn refused(error: KeysFileError) -> ApiError {
    let message = error.to_string();
    match error {
        KeysFileError::Exists { .. } => {
            ApiError::field(ErrorCode::IdempotencyConflict, "name", message)
        }
        KeysFileError::NoSuchKey { .. } => ApiError::new(ErrorCode::NotFound, message),
        // The key's own fault names its field first (`bundles: …`).
        KeysFileError::Invalid { message: what, .. } => {
            let field = [
                "name",
                "scopes",
                "bundles",
                "webhook",
                "weight",
                "rate_per_minute",
            ]
            .into_iter()
            .find(|field| what.starts_with(field));
            match field {
                Some(field) => ApiError::field(ErrorCode::InvalidRequest, field, message),
                None => ApiError::new(ErrorCode::InvalidRequest, message),
            }
        }
        KeysFileError::Read { .. } | KeysFileError::Parse { .. } | KeysFileError::Write { .. } => {
            ApiError::internal(message)
        }
    }
}

/// The API document's entries of the key routes.
pub(super) mod doc {
    use aide::transform::TransformOperation;
    use axum::Json;

    use super::{IssuedKey, KeyList, RevokedKey};
    use crate::api::document::{UNAVAILABLE, answers};

    const NO_FILE: (u16, &str) = (
        409,
        "The config sets no `[auth] keys_file`, or the reload the change needs was rejected \
         (the file is as it was; the message has the reload's errors)",
    );

    pub(in crate::api) fn list(op: TransformOperation<'_>) -> TransformOperation<'_> {
        let op = op
            .summary("List the API keys of the keys file (never a token)")
            .response_with::<200, Json<KeyList>, _>(|r| r.description("The keys"));
        answers(op, &[NO_FILE])
    }

    pub(in crate::api) fn create(op: TransformOperation<'_>) -> TransformOperation<'_> {
        let op = op
            .summary("Make an API key, as `structured-agents keys new` does, and reload")
            .description(
                "The key joins the keys file and the daemon reloads, so it works at once. The \
                 answer carries its token, the only time it is shown.",
            )
            .response_with::<201, Json<IssuedKey>, _>(|r| r.description("The key and its token"));
        answers(
            op,
            &[
                (
                    409,
                    "A key of that name exists (`field`: name); the config sets no `[auth] \
                     keys_file`; or the reload the change needs was rejected (the file is as it \
                     was)",
                ),
                (
                    422,
                    "The key cannot be used (a bad name, no scope, a bad glob)",
                ),
                UNAVAILABLE,
            ],
        )
    }

    pub(in crate::api) fn revoke(op: TransformOperation<'_>) -> TransformOperation<'_> {
        let op = op
            .summary("Revoke an API key, as `structured-agents keys revoke` does, and reload")
            .response_with::<200, Json<RevokedKey>, _>(|r| r.description("The key, revoked"));
        answers(
            op,
            &[
                (404, "No key of that name"),
                (
                    409,
                    "The key is the caller's own or the last admin key, the config sets no \
                     `[auth] keys_file`, or the reload the change needs was rejected (the file is \
                     as it was)",
                ),
                UNAVAILABLE,
            ],
        )
    }
}

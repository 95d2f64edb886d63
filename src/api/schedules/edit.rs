//! `PUT /v1/schedules/{id}`: a schedule made over the API takes a new
//! spec — cron, time zone, input, variables, priority, policies, even
//! bundle — and keeps its id, owner, pause and history (last fire, last
//! job, missed count). Its next fire is the new cron's first from now. A
//! bundle's own schedule is edited in the bundle's `schedule:`.

use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{ScheduleView, authorized, first_fire, not_found};
use crate::access::policy::Action;
use crate::api::AppState;
use crate::api::admission::known_bundle;
use crate::api::auth::Caller;
use crate::api::body::{JsonBody, Path};
use crate::api::error::{ApiError, ErrorCode};
use crate::queue::StoredSchedule;
use crate::schedule::{ScheduleSpec, Stored};
use crate::scheduler::{FROM_BUNDLE, stored_spec};

/// The body of `PUT /v1/schedules/{id}`: the whole new spec.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EditedSchedule {
    pub bundle: String,
    #[serde(flatten)]
    pub spec: ScheduleSpec,
}

/// `PUT /v1/schedules/{id}`.
pub async fn edit(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<EditedSchedule>,
) -> Result<Json<ScheduleView>, ApiError> {
    let schedule = authorized(&state, &caller, Action::ManageSchedule, &id).await?;
    if schedule.source == FROM_BUNDLE {
        return Err(ApiError::new(
            ErrorCode::InvalidState,
            format!(
                "schedule {id} is declared by bundle {id}'s `schedule:`; edit it there (and reload)"
            ),
        ));
    }
    let before: Option<Stored> = serde_json::from_str(&schedule.spec).ok();
    if before.as_ref().is_none_or(|b| b.bundle != body.bundle) {
        // Firing another bundle is making a schedule of it.
        caller.on_bundle(Action::CreateSchedule, &body.bundle, "bundle")?;
    }
    known_bundle(&state, &body.bundle, "bundle")?;
    let next_fire = first_fire(&state, &body.spec)?;
    let edited = StoredSchedule {
        // A LangGraph cron stays one: its client's settings are kept.
        spec: stored_spec(&body.bundle, &body.spec, before.and_then(|b| b.run_meta)),
        next_fire,
        ..schedule
    };
    // Replaces the spec and the next fire; the pause and history stay.
    state.queue.put_schedule(edited).await?;
    tracing::info!(schedule = %id, bundle = %body.bundle, by = caller.name(), "schedule edited");
    let schedule = authorized(&state, &caller, Action::ManageSchedule, &id).await?;
    ScheduleView::of(&state, schedule, &caller)
        .await
        .map(Json)
        .ok_or_else(|| not_found(&id))
}

/// `PUT /v1/schedules/{id}` in the API document.
pub(in crate::api) fn edit_doc(
    op: aide::transform::TransformOperation<'_>,
) -> aide::transform::TransformOperation<'_> {
    let op = op
        .summary("Edit a schedule made over the API: a new spec, its id, pause and history kept")
        .response_with::<200, Json<ScheduleView>, _>(|r| r.description("The schedule, edited"));
    crate::api::document::answers(
        op,
        &[(
            409,
            "A bundle's own schedule: edit the bundle's `schedule:`",
        )],
    )
}

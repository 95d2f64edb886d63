//! `/v1/deliveries`: the outbox's deliveries for operators — above all the
//! dead letters, which only a redrive sends again (`queue::outbox` decides
//! what a redrive does). A key sees and redrives the deliveries of its own
//! jobs; one with `operate_all` those of every job.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;

use super::AppState;
use super::auth::Caller;
use super::body::{Path, Query};
use super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::queue::{DeliveryFilter, DeliveryPage, DeliveryRecord, DeliveryState, Redrive};

/// The query of `GET /v1/deliveries`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "DeliveryListQuery")]
pub struct ListQuery {
    /// Only deliveries in this state.
    pub state: Option<DeliveryState>,
    /// `webhook`.
    pub kind: Option<String>,
    pub job_id: Option<String>,
    /// Deliveries per page, 1 to 1000 (default 50).
    #[schemars(range(min = 1, max = super::job_list::MAX_PAGE))]
    pub limit: Option<usize>,
    /// The `next_cursor` of the page before.
    pub cursor: Option<String>,
}

/// The owner a caller's requests are limited to: none with `operate_all`.
fn owner_of(caller: &Caller) -> Option<String> {
    caller.listing_owner(Action::ReadDeliveries)
}

/// `GET /v1/deliveries`: a page, newest first.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<ListQuery>,
) -> Result<Json<DeliveryPage>, ApiError> {
    let limit = super::job_list::page_limit(query.limit)?;
    let page = state
        .queue
        .list_deliveries(DeliveryFilter {
            state: query.state,
            kind: query.kind,
            job_id: query.job_id,
            owner: owner_of(&caller),
            limit,
            cursor: query.cursor,
        })
        .await?;
    Ok(Json(page))
}

/// `POST /v1/deliveries/{id}/redrive`: a dead delivery is sent again, with
/// all its attempts.
pub async fn redrive(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<DeliveryRecord>, ApiError> {
    let owner = owner_of(&caller);
    match state.queue.redrive_delivery(&id, owner.as_deref()).await? {
        Redrive::Redriven(delivery) => {
            tracing::info!(delivery = %id, job_id = %delivery.job_id, url = %delivery.target, by = caller.name(), "dead webhook delivery redriven");
            Ok(Json(delivery))
        }
        Redrive::NotDead(delivery) => Err(ApiError::new(
            ErrorCode::InvalidState,
            format!(
                "delivery {id} is {}, not dead: only a dead delivery is redriven (a pending one is retried by itself)",
                delivery.state.as_str()
            ),
        )),
        Redrive::NotFound => Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no delivery {id:?} of a job this key may operate on; see GET /v1/deliveries"),
        )),
    }
}

/// `GET /v1/deliveries` in the API document.
pub(super) fn list_doc(
    op: aide::transform::TransformOperation<'_>,
) -> aide::transform::TransformOperation<'_> {
    op.summary("List the outbox's deliveries (dead letters with state=dead), newest first")
        .response_with::<200, Json<DeliveryPage>, _>(|r| r.description("A page of deliveries"))
}

/// `POST /v1/deliveries/{id}/redrive` in the API document.
pub(super) fn redrive_doc(
    op: aide::transform::TransformOperation<'_>,
) -> aide::transform::TransformOperation<'_> {
    let op = op
        .summary("Send a dead delivery again: pending, attempts reset, due now")
        .response_with::<200, Json<DeliveryRecord>, _>(|r| r.description("The delivery, pending"));
    super::document::answers(op, &[(409, "The delivery is not dead")])
}

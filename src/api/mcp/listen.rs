//! `subscriptions/listen`, the stateless 2026-07-28 revision's way to hear
//! of changes: one long-lived request whose SSE answer carries the
//! notifications the client opted in to — `notifications/resources/updated`
//! for each job resource it named (a job, its artifacts or one artifact:
//! each changes when the job does, [`Watch`]) and
//! `notifications/tools/list_changed` when a reload changes the bundles.
//!
//! rmcp acknowledges the accepted filter before [`listen`] runs, sends the
//! SSE keep-alives (a comment every 15 s) and cancels the request when the
//! client goes away. A listen holds one of its API key's event streams
//! (`server.max_event_streams`, `…_per_caller`), like every stream that
//! follows jobs. One that watches only jobs ends, with the revision's final
//! result, once every job it names has ended.

use rmcp::ErrorData as McpError;
use rmcp::model::SubscriptionFilter;
use rmcp::service::SubscriptionContext;
use tokio::sync::broadcast;

use super::super::AppState;
use super::super::auth::Caller;
use super::resources::{self, MAX_SUBSCRIPTIONS, TELL_WITHIN, Watch};

/// What of a requested filter this server serves: the bundle list's changes
/// and the job resources named (the first [`MAX_SUBSCRIPTIONS`] of them;
/// URIs that name no job resource are left out). Whether the caller may
/// read each job is checked when the listen starts ([`listen`]).
pub fn accepted(requested: &SubscriptionFilter) -> SubscriptionFilter {
    let mut accepted = SubscriptionFilter::new();
    accepted.tools_list_changed = requested.tools_list_changed;
    accepted.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
        uris.iter()
            .filter(|uri| resources::names_a_job(uri))
            .take(MAX_SUBSCRIPTIONS)
            .cloned()
            .collect()
    });
    accepted
}

/// Runs one listen until the client goes away, the daemon stops, or
/// nothing is left to tell of. A job URI the caller may not read ends it
/// at once with the error `resources/read` gives (so a key never hears of
/// another key's job); so does a caller whose event streams are all open.
pub async fn listen(
    state: &AppState,
    caller: &Caller,
    subscription: SubscriptionContext,
    mut tools_changed: broadcast::Receiver<()>,
) -> Result<(), McpError> {
    let stream = state.streams.acquire(caller.name()).map_err(|full| {
        McpError::invalid_request(format!("subscriptions/listen refused: {full}"), None)
    })?;
    let revoked = stream.revoked();
    let accepted = subscription.accepted().clone();
    let mut watch = Watch::new(state);
    for uri in accepted.resource_subscriptions.iter().flatten() {
        watch.add(caller, uri).await?;
    }
    let mut tools = accepted.tools_list_changed == Some(true);
    let sink = subscription.sink();
    while tools || !watch.is_empty() {
        let told = tokio::select! {
            () = subscription.cancelled() => return Ok(()),
            // The caller's key was revoked by a reload.
            () = revoked.cancelled() => return Ok(()),
            changed = watch.changed(), if !watch.is_empty() => {
                let Some(ids) = changed else { return Ok(()) };
                let mut told = true;
                for uri in watch.uris(ids).await {
                    told = told && tell(sink.notify_resource_updated(uri)).await;
                }
                told
            }
            heard = tools_changed.recv(), if tools => match heard {
                Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {
                    tell(sink.notify_tool_list_changed()).await
                }
                Err(broadcast::error::RecvError::Closed) => {
                    tools = false;
                    true
                }
            },
        };
        // A client that takes no notification within TELL_WITHIN is gone.
        if !told {
            return Ok(());
        }
    }
    Ok(())
}

/// Whether a notification was sent in time.
async fn tell<E>(send: impl std::future::Future<Output = Result<(), E>>) -> bool {
    matches!(tokio::time::timeout(TELL_WITHIN, send).await, Ok(Ok(())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_job_resources_and_the_tool_list_are_accepted() {
        let mut requested = SubscriptionFilter::new();
        requested.tools_list_changed = Some(true);
        requested.prompts_list_changed = Some(true);
        requested.resource_subscriptions = Some(vec![
            "sa://jobs/j1".into(),
            "test://static-text".into(),
            "sa://jobs/j2/artifacts/review".into(),
        ]);
        let accepted = accepted(&requested);
        assert_eq!(accepted.tools_list_changed, Some(true));
        assert_eq!(accepted.prompts_list_changed, None);
        assert_eq!(
            accepted.resource_subscriptions,
            Some(vec![
                "sa://jobs/j1".to_string(),
                "sa://jobs/j2/artifacts/review".to_string()
            ])
        );
        let many = (0..100).map(|i| format!("sa://jobs/j{i}")).collect();
        requested.resource_subscriptions = Some(many);
        let accepted = super::accepted(&requested);
        assert_eq!(
            accepted.resource_subscriptions.map(|uris| uris.len()),
            Some(MAX_SUBSCRIPTIONS)
        );
    }
}

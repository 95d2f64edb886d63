//! Caps the model requests in flight to one endpoint across all jobs, so a
//! small model server is not flooded: a fixed permit, and in front of it
//! the endpoint's load gate when it declares `load` (`crate::load`).

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Semaphore;

use crate::client::watch::{self, CallNote, CallWatcher};
use crate::client::{ChatBackend, ChatRequest, ChatResponse, ClientError, EndpointInfo, OnToken};
use crate::load::LoadGate;

pub struct LimitedBackend {
    inner: Arc<dyn ChatBackend>,
    permits: Semaphore,
    gate: Option<Arc<LoadGate>>,
}

impl LimitedBackend {
    pub fn wrap(inner: Arc<dyn ChatBackend>, max_concurrent: usize) -> Arc<dyn ChatBackend> {
        Self::wrap_gated(inner, max_concurrent, None)
    }

    /// `wrap`, new calls first waiting at `gate` for the server's load.
    pub fn wrap_gated(
        inner: Arc<dyn ChatBackend>,
        max_concurrent: usize,
        gate: Option<Arc<LoadGate>>,
    ) -> Arc<dyn ChatBackend> {
        Arc::new(Self {
            inner,
            permits: Semaphore::new(max_concurrent.max(1)),
            gate,
        })
    }
}

/// A 503 or 529 answer: the server says it is overloaded.
fn overload_status(error: &ClientError) -> Option<u16> {
    match error {
        ClientError::Status { status, .. } if matches!(status, 503 | 529) => Some(*status),
        _ => None,
    }
}

#[async_trait]
impl ChatBackend for LimitedBackend {
    async fn complete(
        &self,
        request: &ChatRequest,
        on_token: Option<OnToken>,
    ) -> Result<ChatResponse, ClientError> {
        // The backend decides how long it holds a permit: an HTTP backend
        // holds one per attempt, never across its backoff sleeps.
        let call = self
            .inner
            .complete_limited(request, on_token, &self.permits);
        let Some(gate) = &self.gate else {
            return call.await;
        };
        gate.admit().await;
        // Refusals of earlier attempts are heard as they happen; the last
        // one comes back as the call's error.
        let hears = gate.clone();
        let refusals: CallWatcher = Arc::new(move |note| {
            if let CallNote::Retrying { error, .. } = note
                && let Some(status) = overload_status(error)
            {
                hears.refused(status);
            }
        });
        let result = watch::also_watching(refusals, call).await;
        if let Some(status) = result.as_ref().err().and_then(overload_status) {
            gate.refused(status);
        }
        result
    }

    fn info(&self) -> EndpointInfo {
        self.inner.info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{EndpointSettings, HttpBackend};
    use crate::mock::{MockServer, Script};
    use std::time::Duration;

    use crate::client::test_request as request;

    /// A call waiting out a server's `Retry-After` must not hold the
    /// endpoint's only permit: another job's call goes through meanwhile.
    #[tokio::test]
    async fn backoff_sleeps_do_not_hold_the_endpoint_permit() {
        let script = Script::parse(
            "mode: sequential\nreplies:\n  - {status: 503, error: busy, retry_after: 3600}\n  - {content: done}\n",
            "t",
        )
        .unwrap();
        let server = MockServer::start(script).await.unwrap();
        let mut settings = EndpointSettings::new("mock", server.base_url());
        settings.max_retries = 1;
        settings.backoff_max = Duration::from_secs(3600);
        let backend = LimitedBackend::wrap(Arc::new(HttpBackend::new(settings).unwrap()), 1);

        let first = tokio::spawn({
            let backend = backend.clone();
            async move { backend.complete(&request(), None).await }
        });
        // Wait until the first call's request reached the server, so it is
        // the one answered 503 and then sleeping for an hour.
        while server.requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Before the fix this waited for the first call's whole hour; the
        // bound only keeps a regression from hanging the suite.
        let second =
            tokio::time::timeout(Duration::from_secs(60), backend.complete(&request(), None))
                .await
                .expect("the second call waited for the first call's backoff")
                .unwrap();
        assert_eq!(second.message.content.as_deref(), Some("done"));
        assert!(!first.is_finished(), "the first call is still backing off");
        first.abort();
    }
}

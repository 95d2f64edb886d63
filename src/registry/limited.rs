//! Caps the model requests in flight to one endpoint across all jobs, so a
//! small model server is not flooded: a fixed permit, and in front of it
//! the endpoint's load gate when it declares `load` (`crate::load`). Every
//! HTTP attempt that fails is told to the daemon's bus
//! (`DaemonEvent::ModelAttemptFailed`: the metrics count each one) and, when
//! the server says it is overloaded, to the gate.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Semaphore;

use crate::client::watch::{self, CallNote, CallWatcher};
use crate::client::{ChatBackend, ChatRequest, ChatResponse, ClientError, EndpointInfo, OnToken};
use crate::events::daemon::{DaemonBus, DaemonEvent};
use crate::load::LoadGate;

pub struct LimitedBackend {
    inner: Arc<dyn ChatBackend>,
    permits: Semaphore,
    gate: Option<Arc<LoadGate>>,
    failures: Arc<Failures>,
    /// Tells `failures` of each attempt a call retries. One for every
    /// call: a call that does not fail builds nothing to report.
    retries: CallWatcher,
}

impl LimitedBackend {
    pub fn wrap(
        inner: Arc<dyn ChatBackend>,
        max_concurrent: usize,
        bus: DaemonBus,
    ) -> Arc<dyn ChatBackend> {
        Self::wrap_gated(inner, max_concurrent, None, bus)
    }

    /// `wrap`, new calls first waiting at `gate` for the server's load.
    pub fn wrap_gated(
        inner: Arc<dyn ChatBackend>,
        max_concurrent: usize,
        gate: Option<Arc<LoadGate>>,
        bus: DaemonBus,
    ) -> Arc<dyn ChatBackend> {
        let failures = Arc::new(Failures {
            endpoint: inner.clone(),
            bus,
            gate: gate.clone(),
        });
        let hears = failures.clone();
        let retries: CallWatcher = Arc::new(move |note| {
            if let CallNote::Retrying { error, model, .. } = note {
                hears.heard(model, error);
            }
        });
        Arc::new(Self {
            inner,
            permits: Semaphore::new(max_concurrent.max(1)),
            gate,
            failures,
            retries,
        })
    }
}

/// Who hears of a failed HTTP attempt: the bus, and the gate when the
/// server refused it as overloaded. What they are told is made only when
/// an attempt failed.
struct Failures {
    /// The backend whose attempts these are (its name labels the event).
    endpoint: Arc<dyn ChatBackend>,
    bus: DaemonBus,
    gate: Option<Arc<LoadGate>>,
}

impl Failures {
    /// An attempt of a call to `model` failed with `error`.
    fn heard(&self, model: &str, error: &ClientError) {
        self.bus.publish(DaemonEvent::ModelAttemptFailed {
            endpoint: self.endpoint.info().name,
            model: model.to_string(),
            error_type: error.kind(),
        });
        if let (Some(gate), Some(status)) = (&self.gate, overload_status(error)) {
            gate.refused(status);
        }
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
        if let Some(gate) = &self.gate {
            gate.admit().await;
        }
        // Earlier attempts' failures are heard as they happen; the last
        // one comes back as the call's error.
        let result = watch::also_watching(self.retries.clone(), call).await;
        if let Err(error) = &result {
            self.failures.heard(request.model(), error);
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
        let backend = LimitedBackend::wrap(
            Arc::new(HttpBackend::new(settings).unwrap()),
            1,
            DaemonBus::new(),
        );

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

    /// The failed attempts the daemon bus heard of.
    #[derive(Default)]
    struct Failed(std::sync::Mutex<Vec<(String, String, &'static str)>>);

    impl crate::events::daemon::DaemonObserver for Failed {
        fn on_daemon_event(&self, event: &crate::events::daemon::DaemonEvent) {
            if let crate::events::daemon::DaemonEvent::ModelAttemptFailed {
                endpoint,
                model,
                error_type,
            } = event
            {
                let heard = (endpoint.clone(), model.clone(), *error_type);
                self.0.lock().unwrap().push(heard);
            }
        }
    }

    /// Each failed attempt is heard once, named by its endpoint and the
    /// call's model: the one retried as it fails, the last as the call's
    /// error; a call that succeeds tells nothing.
    #[tokio::test]
    async fn each_failed_attempt_is_heard_once_with_its_endpoint_and_model() {
        let script = Script::parse(
            "mode: sequential\nreplies:\n  - {status: 503, error: busy}\n  - {status: 500, error: down}\n  - {content: done}\n",
            "t",
        )
        .unwrap();
        let server = MockServer::start(script).await.unwrap();
        let bus = DaemonBus::new();
        let failed = Arc::new(Failed::default());
        bus.subscribe(failed.clone());
        let mut settings = EndpointSettings::new("mock", server.base_url());
        settings.max_retries = 1;
        settings.backoff_base = Duration::from_millis(1);
        settings.backoff_max = Duration::from_millis(1);
        let backend = LimitedBackend::wrap(Arc::new(HttpBackend::new(settings).unwrap()), 1, bus);
        let refused = backend.complete(&request(), None).await.unwrap_err();
        assert!(matches!(refused, ClientError::Status { status: 500, .. }));
        let answered = backend.complete(&request(), None).await.unwrap();
        assert_eq!(answered.message.content.as_deref(), Some("done"));
        let heard = failed.0.lock().unwrap().clone();
        let mock = |kind| ("mock".to_string(), "m".to_string(), kind);
        assert_eq!(heard, [mock("http_5xx"), mock("http_5xx")]);
    }

    /// What an endpoint's gate told the daemon bus.
    #[derive(Default)]
    struct Heard(std::sync::Mutex<Vec<String>>);

    impl crate::events::daemon::DaemonObserver for Heard {
        fn on_daemon_event(&self, event: &crate::events::daemon::DaemonEvent) {
            if let crate::events::daemon::DaemonEvent::EndpointLoad { change, .. } = event {
                self.0.lock().unwrap().push(format!("{change:?}"));
            }
        }
    }

    /// A 503 from the server is a load signal: the next new call waits
    /// for a reading that shows room, then goes.
    #[tokio::test]
    async fn a_503_holds_new_calls_until_the_next_reading() {
        let script = Script::parse(
            "mode: sequential\nqueueing: {slots: 1}\nreplies:\n  - {status: 503, error: busy}\n  - {content: done}\n",
            "t",
        )
        .unwrap();
        let server = MockServer::start(script).await.unwrap();
        let bus = crate::events::daemon::DaemonBus::new();
        let heard = Arc::new(Heard::default());
        bus.subscribe(heard.clone());
        let mut load = crate::config::LoadConfig {
            kind: crate::config::LoadKind::Vllm,
            metrics_url: Some(format!("http://{}/metrics", server.addr)),
            ..crate::config::LoadConfig::default()
        };
        // Readings after the first are far apart: this test reads.
        load.poll_interval.0 = Duration::from_secs(10);
        let gate = crate::load::LoadGate::start("mock".into(), load, bus.clone());
        let mut settings = EndpointSettings::new("mock", server.base_url());
        settings.max_retries = 0;
        let backend = LimitedBackend::wrap_gated(
            Arc::new(HttpBackend::new(settings).unwrap()),
            4,
            Some(gate.clone()),
            bus,
        );
        let heard_now = || heard.0.lock().unwrap().join(" ");
        // The poller's first reading (at start) is in before the 503.
        while !heard_now().contains("Signals") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let refused = backend.complete(&request(), None).await.unwrap_err();
        assert!(matches!(refused, ClientError::Status { status: 503, .. }));
        let asked = request();
        let second = backend.complete(&asked, None);
        tokio::pin!(second);
        // It waits at the gate: the bus hears it held, and it does not finish.
        while !heard_now().contains("Held") {
            assert!(
                futures::poll!(&mut second).is_pending(),
                "a new call went ahead right after the server refused one"
            );
            tokio::task::yield_now().await;
        }
        assert!(futures::poll!(&mut second).is_pending());
        gate.read(crate::load::signals::Signals::default());
        let reply = second.await.unwrap();
        assert_eq!(reply.message.content.as_deref(), Some("done"));
        let heard = heard_now();
        assert!(
            heard.contains("Refused { status: 503 }")
                && heard.contains("Held { first_call: false }")
                && heard.contains("Released { first_call: false }"),
            "{heard}"
        );
    }
}

//! Caps the model requests in flight to one endpoint across all jobs, so a
//! small model server is not flooded.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Semaphore;

use crate::client::{ChatBackend, ChatRequest, ChatResponse, ClientError, EndpointInfo, OnToken};

pub struct LimitedBackend {
    inner: Arc<dyn ChatBackend>,
    permits: Semaphore,
}

impl LimitedBackend {
    pub fn wrap(inner: Arc<dyn ChatBackend>, max_concurrent: usize) -> Arc<dyn ChatBackend> {
        Arc::new(Self {
            inner,
            permits: Semaphore::new(max_concurrent.max(1)),
        })
    }
}

#[async_trait]
impl ChatBackend for LimitedBackend {
    async fn complete(
        &self,
        request: &ChatRequest,
        on_token: Option<OnToken>,
    ) -> Result<ChatResponse, ClientError> {
        // The semaphore is never closed, so acquiring cannot fail; if it
        // ever were, running unthrottled beats failing the job.
        let _permit = self.permits.acquire().await.ok();
        self.inner.complete(request, on_token).await
    }

    fn info(&self) -> EndpointInfo {
        self.inner.info()
    }
}

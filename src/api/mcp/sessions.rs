//! The MCP sessions of `/mcp`, bounded: rmcp's in-memory session manager
//! wrapped so that a session nobody has used for `server.mcp.session_idle`
//! is closed (one with a request still running — a long `tools/call` — is
//! busy, never idle), and so that the door can count the sessions open
//! against `server.mcp.max_sessions`. It must not know about bundles or jobs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};
use tokio_util::sync::CancellationToken;

/// When a session was last used and how many of its requests are running.
#[derive(Debug)]
struct Use {
    last: Instant,
    running: usize,
}

type Uses = Arc<Mutex<HashMap<SessionId, Use>>>;

fn lock(uses: &Uses) -> std::sync::MutexGuard<'_, HashMap<SessionId, Use>> {
    uses.lock().unwrap_or_else(|p| p.into_inner())
}

/// rmcp's local session manager with idle expiry and a count of the open
/// sessions.
pub struct Sessions {
    inner: LocalSessionManager,
    uses: Uses,
    idle: Duration,
    /// Serializes `initialize` requests at the door, so that counting the
    /// open sessions and opening one cannot interleave.
    pub(super) opening: tokio::sync::Mutex<()>,
}

impl Sessions {
    /// Sessions closed after `idle` without a request; a task closes them
    /// until `stop` is cancelled (or the sessions are dropped).
    pub fn new(idle: Duration, stop: CancellationToken) -> Arc<Self> {
        let mut inner = LocalSessionManager::default();
        // Expiry is ours (below): rmcp's own idle timer would also close a
        // session in the middle of a long tools/call.
        inner.session_config.keep_alive = None;
        let sessions = Arc::new(Self {
            inner,
            uses: Uses::default(),
            idle,
            opening: tokio::sync::Mutex::new(()),
        });
        tokio::spawn(expire(Arc::downgrade(&sessions), idle, stop));
        sessions
    }

    /// The sessions open now.
    pub async fn open(&self) -> usize {
        self.inner.sessions.read().await.len()
    }

    fn touch(&self, id: &SessionId) {
        if let Some(used) = lock(&self.uses).get_mut(id) {
            used.last = Instant::now();
        }
    }

    /// The sessions no request has used for `idle`, none running.
    fn idle_ones(&self) -> Vec<SessionId> {
        lock(&self.uses)
            .iter()
            .filter(|(_, used)| used.running == 0 && used.last.elapsed() >= self.idle)
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// Closes idle sessions, checking a few times per idle period.
async fn expire(sessions: Weak<Sessions>, idle: Duration, stop: CancellationToken) {
    let period = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    loop {
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            () = stop.cancelled() => return,
        }
        let Some(sessions) = sessions.upgrade() else {
            return;
        };
        for id in sessions.idle_ones() {
            tracing::info!(session = %id, idle = %humantime::format_duration(idle), "closing an idle MCP session (server.mcp.session_idle)");
            if let Err(e) = sessions.close_session(&id).await {
                tracing::warn!(session = %id, error = %e, "cannot close an idle MCP session");
            }
        }
    }
}

/// Counts a request of a session as running until its stream is dropped.
struct Running {
    uses: Uses,
    id: SessionId,
}

impl Running {
    fn start(uses: &Uses, id: &SessionId) -> Self {
        if let Some(used) = lock(uses).get_mut(id) {
            used.running += 1;
            used.last = Instant::now();
        }
        Self {
            uses: uses.clone(),
            id: id.clone(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(used) = lock(&self.uses).get_mut(&self.id) {
            used.running = used.running.saturating_sub(1);
            used.last = Instant::now();
        }
    }
}

impl SessionManager for Sessions {
    type Error = LocalSessionManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.inner.create_session().await?;
        lock(&self.uses).insert(
            id.clone(),
            Use {
                last: Instant::now(),
                running: 0,
            },
        );
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let _running = Running::start(&self.uses, id);
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        lock(&self.uses).remove(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        // Busy from now until the answer's stream is dropped.
        let running = Running::start(&self.uses, id);
        let stream = self.inner.create_stream(id, message).await?;
        Ok(stream.map(move |message| {
            let _ = &running;
            message
        }))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.touch(id);
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        // Listening for notifications is not a request: it does not keep an
        // otherwise idle session open.
        self.touch(id);
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        self.inner.resume(id, last_event_id).await
    }
}

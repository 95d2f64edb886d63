//! The daemon's periodic sweeps (retention, approval timeouts): one pass
//! every period, on a task of its own, until shutdown.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Runs `pass` every `period` until `shutdown` (a pass under way finishes).
pub fn every<F, Fut>(
    period: Duration,
    shutdown: CancellationToken,
    mut pass: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = shutdown.cancelled() => return,
            }
            pass().await;
        }
    })
}

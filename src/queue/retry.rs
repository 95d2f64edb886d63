//! Retry timing: exponential backoff with jitter, and how many crash
//! resumes a job gets before it parks.

use std::time::Duration;

use rand::Rng;

/// Retry timing.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// Resumes after a crash before a job parks as a poison pill.
    pub max_crash_resumes: u32,
}

impl RetryPolicy {
    /// Exponential backoff with jitter (50–100 % of the capped delay).
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = self
            .backoff_base
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
        exp.min(self.backoff_max)
            .mul_f64(rand::rng().random_range(0.5..=1.0))
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            max_crash_resumes: 5,
        }
    }
}

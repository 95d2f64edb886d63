//! Load-aware admission per endpoint (docs/models.md, "Load-aware
//! admission"): a poller reads the model server's Prometheus page, and a
//! gate holds new model calls while the server's queue or KV cache is past
//! the endpoint's thresholds — a job's first call already below a second,
//! lower threshold — releasing them in priority and fairness order as it
//! drains. A 503 or 529 from the server counts as a load signal too. When
//! the page cannot be read, the gate opens and only the endpoint's fixed
//! permit applies (never unlimited), with a warning.
//!
//! This module knows model calls and load pages; it does not know what a
//! bundle or a queue is: the worker describes each job's calls with a
//! [`ticket::JobTicket`].

pub mod gate;
mod poller;
pub mod signals;
pub mod ticket;

pub use gate::LoadGate;

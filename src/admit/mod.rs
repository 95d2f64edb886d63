//! Admission's state, below the wires that admit: what every way in that
//! starts a job or a direct run shares between requests (`gate`: each
//! key's rate limiter, its in-flight lock and its direct runs). It knows
//! keys, never HTTP.

mod gate;

pub use gate::{DirectRunTicket, Gate};

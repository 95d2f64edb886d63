//! structured-agents: runs LLM tool-calling agents as durable jobs.
//!
//! The modules follow the data flow of `docs/ARCHITECTURE.md`: bundles and
//! config feed a registry; jobs flow from the queue to workers that run the
//! kernel; the kernel calls the model through a plugin and a client, runs
//! tools through the tool engine, and emits events to observers.

// Library code must not unwrap what input, config, the network or plugins
// can influence; tests may.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod access;
pub mod admit;
pub mod api;
pub mod approval;
pub mod budget;
pub mod bundle;
pub mod cli;
pub mod client;
pub mod config;
pub mod control;
pub mod daemon;
pub mod duration;
pub mod egress;
pub mod endpoints;
pub mod evals;
pub mod events;
pub mod failpoint;
pub mod follow;
pub mod group_chat;
pub mod hex;
pub mod import;
pub mod journal;
pub mod kernel;
pub mod load;
pub mod mock;
pub mod model;
pub mod plugins;
pub mod queue;
pub mod registry;
pub mod release;
pub mod runner;
pub mod schedule;
pub mod scheduler;
pub mod telemetry;
pub mod tools;
pub mod trace_context;
pub mod types;
pub mod verify;
pub mod versions;
pub mod webhook;
pub mod worker;
pub mod workflow;

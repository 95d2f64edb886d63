//! The `structured-agents` binary: parses the command line and hands off to
//! `structured_agents::cli`. Glue only.

fn main() {}

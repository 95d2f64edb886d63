//! The `structured-agents` binary: parses the command line and hands off to
//! `structured_agents::cli`. Glue only. Exit codes: 0 success, 1 the job or
//! check failed, 2 usage or startup error, 3 max turns, 4 cancelled.

use clap::Parser;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = structured_agents::cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match runtime.block_on(structured_agents::cli::dispatch(cli)) {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

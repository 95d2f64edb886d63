//! The command line describing itself: shell completions and the man page,
//! generated from the same clap definitions that parse the arguments, so
//! they cannot drift from the flags. The Debian package ships both
//! (ci/package-test generates them from the binary it packages).

use std::io::Write;

use clap::CommandFactory;

use super::Cli;

pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<i32> {
    let mut command = Cli::command();
    let name = command.get_name().to_string();
    // Into memory first: generate() panics on a write error (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, name, &mut script);
    std::io::stdout().write_all(&script)?;
    Ok(0)
}

pub fn manpage() -> anyhow::Result<i32> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut page)?;
    std::io::stdout().write_all(&page)?;
    Ok(0)
}

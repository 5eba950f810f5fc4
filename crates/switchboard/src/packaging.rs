//! What packagers install beside the binary, generated from the CLI
//! definitions so it never drifts from them: shell completions
//! (`switchboard completions SHELL`) and man pages (`switchboard man`).

use std::{
    io::{self, Write},
    path::Path,
};

use anyhow::Context;
use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::Man;

use crate::cli::Cli;

/// `switchboard completions SHELL`: the script, on stdout.
pub fn completions(shell: Shell) -> anyhow::Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "switchboard", &mut script);
    print(&script)
}

/// `switchboard man [COMMAND]`: one page (switchboard's own, or a
/// subcommand's as `switchboard-COMMAND(1)`) on stdout.
pub fn print_page(command: Option<&str>) -> anyhow::Result<()> {
    let cli = built();
    let page = match command {
        None => cli,
        Some(name) => match cli.find_subcommand(name) {
            Some(sub) => sub.clone(),
            None => {
                let known: Vec<_> = cli.get_subcommands().map(|s| s.get_name()).collect();
                Cli::command()
                    .error(
                        clap::error::ErrorKind::InvalidValue,
                        format!(
                            "switchboard has no command {name:?}; its commands are {}",
                            known.join(", ")
                        ),
                    )
                    .exit()
            }
        },
    };
    let mut roff = Vec::new();
    man(page).render(&mut roff)?;
    print(&roff)
}

/// `switchboard man --out DIR`: switchboard.1 and a page per command.
pub fn write_pages(dir: &Path) -> anyhow::Result<()> {
    let cli = built();
    for page in std::iter::once(&cli).chain(cli.get_subcommands()) {
        man(page.clone()).generate_to(dir).with_context(|| {
            format!(
                "cannot write the man pages into {}; check that the directory exists and is writable",
                dir.display()
            )
        })?;
    }
    println!("{}", dir.display());
    Ok(())
}

/// The CLI as the pages show it: no `help` command (`--help` says it all),
/// and built, which names each subcommand's page and synopsis after the
/// program (`switchboard-serve`, `switchboard serve`).
fn built() -> clap::Command {
    let mut cli = Cli::command().disable_help_subcommand(true);
    cli.build();
    cli
}

fn man(page: clap::Command) -> Man {
    Man::new(page).source(format!("switchboard {}", env!("CARGO_PKG_VERSION")))
}

/// Writes to stdout; a reader that stops early (`| head`) is not an error.
fn print(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

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
/// command's as `switchboard-COMMAND(1)`; `token new` or `token-new` for a
/// command of a command) on stdout.
pub fn print_page(command: Option<&str>) -> anyhow::Result<()> {
    let cli = built();
    let page = match command {
        None => cli,
        Some(name) => {
            let wanted = format!(
                "switchboard-{}",
                name.split([' ', '-'])
                    .filter(|w| !w.is_empty())
                    .collect::<Vec<_>>()
                    .join("-")
            );
            let pages = pages(&cli);
            match pages
                .iter()
                .find(|page| page.get_display_name() == Some(wanted.as_str()))
            {
                Some(page) => page.clone(),
                None => {
                    let known: Vec<_> = pages
                        .iter()
                        .skip(1)
                        .filter_map(|page| page.get_display_name()?.strip_prefix("switchboard-"))
                        .collect();
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
            }
        }
    };
    let mut roff = Vec::new();
    man(page).render(&mut roff)?;
    print(&roff)
}

/// `switchboard man --out DIR`: switchboard.1 and a page per command (and
/// per command of a command).
pub fn write_pages(dir: &Path) -> anyhow::Result<()> {
    for page in pages(&built()) {
        man(page).generate_to(dir).with_context(|| {
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

/// Every page: switchboard's, then each command's and its commands' in
/// turn (`switchboard-token`, `switchboard-token-new`), as the SEE ALSO
/// sections name them.
fn pages(command: &clap::Command) -> Vec<clap::Command> {
    let mut all = vec![command.clone()];
    for sub in command.get_subcommands() {
        all.extend(pages(sub));
    }
    all
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

//! The `tributary` command line: parses arguments, sets up logging, and hands the subcommand to
//! [`cli`], where each command has its module. Nothing else lives here.

use std::process::ExitCode;

use clap::Parser;

mod cli;

/// The harvester and the store allocate and free many small buffers (bodies, rows, batches);
/// mimalloc, without transparent huge pages, serves that churn with less CPU than glibc's
/// malloc (docs/STORE.md, "Why fjall").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    init_tracing(cli.global.log_json);
    match cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn init_tracing(json: bool) {
    // The database engine logs its own housekeeping (databases created, tables written) at
    // info; its warnings and errors still come through.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,fjall=warn,lsm_tree=warn"));
    // Colour only on a terminal: escape codes in a log file or journal are noise.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

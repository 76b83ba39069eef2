//! `check`: validates a document on its own, with no configuration and no store.

use std::process::ExitCode;

use clap::Args;
use tributary::check::{self, CheckReport};
use tributary::model::ReadOptions;

#[derive(Debug, Args)]
pub(super) struct CheckArgs {
    /// A file path, or an http(s) URL (a ResourceSync document, or an OAI-PMH base URL).
    input: String,
    /// Maximum document size in bytes (decompressed).
    #[arg(long, default_value_t = tributary::model::SITEMAP_MAX_BYTES)]
    max_bytes: u64,
    /// Maximum number of entries.
    #[arg(long, default_value_t = tributary::model::SITEMAP_MAX_ENTRIES)]
    max_entries: usize,
    /// Print only the summary and errors, not warnings.
    #[arg(long, short)]
    quiet: bool,
}

pub(super) fn run_check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let opts = ReadOptions {
        name: args.input.clone(),
        max_bytes: args.max_bytes,
        max_entries: args.max_entries,
        ..ReadOptions::default()
    };
    let report = if check::is_url(&args.input) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        match rt.block_on(check::check_any_url(&args.input, opts)) {
            Ok(check::Checked::Oai(r)) => {
                println!("{r}");
                return Ok(if r.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS });
            }
            Ok(check::Checked::ResourceSync(r)) => Ok(*r),
            Err(e) => Err(e),
        }
    } else {
        check::check_file(args.input.as_ref(), opts)
    };
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {:#}", anyhow::Error::new(e));
            return Ok(ExitCode::from(2));
        }
    };
    print_report(&report, args.quiet);
    Ok(if report.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn print_report(report: &CheckReport, quiet: bool) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout().lock(), "{}", report.render(!quiet));
}

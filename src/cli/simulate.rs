//! `simulate`: the simulator's command line is the library's (`tributary::simulate::cli`); the
//! binary gives it a runtime and Ctrl-C.

use std::process::ExitCode;

pub(super) fn run_simulate(args: tributary::simulate::cli::SimulateArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(tributary::simulate::cli::run(args, async {
        let _ = tokio::signal::ctrl_c().await;
    }))?;
    Ok(ExitCode::SUCCESS)
}

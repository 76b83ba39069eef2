//! The `tributary` binary as an operator runs it: commands whose output the tests read, and
//! long-running ones they signal and wait for. Every wait is bounded.

use std::process::{Child, Command, ExitStatus, Output};
use std::time::{Duration, Instant};

/// `tributary ARGS…`, not started yet. `RUST_LOG` is cleared: the tests read what the binary
/// prints, and a developer's own setting would add to it.
pub(crate) fn tributary(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tributary"));
    cmd.args(args).env_remove("RUST_LOG");
    cmd
}

/// Runs `tributary ARGS…` to its end, off the runtime (see [`finish`]).
pub(crate) async fn run(args: &[&str]) -> Output {
    finish(tributary(args)).await
}

/// Runs `cmd` to its end on a blocking thread, so the test's own servers on the runtime keep
/// answering it meanwhile.
pub(crate) async fn finish(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap()
}

/// Sends `signal` (`INT`, `TERM`…) to `child`, as an operator's Ctrl-C or service manager would.
pub(crate) fn signal(child: &Child, signal: &str) {
    let sent = Command::new("kill").arg(format!("-{signal}")).arg(child.id().to_string()).status().unwrap();
    assert!(sent.success(), "kill -{signal} {}", child.id());
}

/// Waits at most `limit` for `child` to exit: its status, or `None` if it is still running.
pub(crate) async fn wait_for_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#!/usr/bin/env bash
# The synchronization paper's metrics (seed 000_…: average consistency, latency, efficiency)
# for Tributary following a changing simulated Source of 1,000 resources: by polling at
# several intervals and by push, at several change rates. Each run: the simulator (in the
# example's process, real clock, counting the bytes it serves) stands still until the
# Destination — the `tributary` binary on a fresh store — holds the baseline; then it changes
# for DURATION seconds, measured (examples/sync_bench.rs says how).
#
# Usage: scripts/bench-sync.sh          the full matrix: rates 1, 10, 50 changes/s × push and
#                                       polling every 1, 5, 10, 30 s, 60 s each (~20 min)
#        QUICK=1 scripts/bench-sync.sh  10 changes/s, push and 5 s polling, 20 s each (~1 min)
# env:   RATES, MODES ("push,1,5"), DURATION (s), REPEAT + REPEAT_RATES (rows run several
#        times; the table shows each metric's median), SIZES ("100-2000" bytes),
#        OUT (target/bench-sync), LOGS (a directory keeping each Destination's log),
#        PROFILE (cargo profile of both binaries: release), FROM (earlier invocations'
#        OUT/sync-bench-runs.md, comma-separated: their table and plot together, no new runs)
# Writes OUT/sync-bench.md (medians), OUT/sync-bench-runs.md (every run), OUT/sync-bench.svg.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PROFILE=${PROFILE:-release}
cargo build --profile "$PROFILE" --bin tributary --example sync_bench
DIR=$PROFILE
[ "$PROFILE" = dev ] && DIR=debug
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
TRIBUTARY_BIN=$TARGET/$DIR/tributary exec "$TARGET/$DIR/examples/sync_bench"

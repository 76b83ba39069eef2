#!/usr/bin/env bash
# Push through an aggregator chain: origin → A → B → C, every hop following the one before it
# by ResourceSync Change Notification over WebSub, all on 127.0.0.1. The origin is
# `tributary simulate --push` (its own hub); A, B and C are `tributary run` with the built-in
# hub, polling only hourly. examples/chain_bench.rs subscribes to all four hubs, times every
# delivery, and prints per hop the latency of each origin change (median, p95, max) and the
# time until C serves the new bitstream (sha-256 checked).
#
# Usage: scripts/bench-chain.sh [RUNS]   env: RESOURCES (1000), RATE (10 changes/s),
#        SECONDS_PER_RUN (60), PORT (first of 5 ports, 18600), TRIBUTARY (binary), WORK
set -euo pipefail
RUNS=${1:-3}
RESOURCES=${RESOURCES:-1000}
RATE=${RATE:-10}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-60}
PORT=${PORT:-18600}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
(cd "$ROOT" && cargo build --release --quiet --bin tributary --example chain_bench)
BIN=${TRIBUTARY:-$TARGET/release/tributary}
WORK=${WORK:-$(mktemp -d /tmp/bench-chain.XXXXXX)}
echo "work: $WORK; $RESOURCES resources, $RATE changes/s, $SECONDS_PER_RUN s per run, $RUNS runs"
for run in $(seq 1 "$RUNS"); do
    echo "## run $run"
    "$TARGET/release/examples/chain_bench" "$BIN" "$WORK/run-$run" "$RESOURCES" "$RATE" "$SECONDS_PER_RUN" "$PORT"
    echo
done

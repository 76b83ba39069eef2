#!/usr/bin/env bash
# The whole product on one machine, offline: starts the three simulated Sources that the
# shipped sources.toml declares (one of them posing as an upstream aggregator, so `via` links
# to an origin show), then `tributary run`, which harvests them continuously and republishes
# the aggregate at http://127.0.0.1:8080/. Ctrl-C stops everything; running it again resumes
# from the store.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin tributary
bin=${CARGO_TARGET_DIR:-target}/release/tributary
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
"$bin" simulate --listen 127.0.0.1:8091 --resources 500 --rate 1 --seed 1 & pids+=($!)
"$bin" simulate --listen 127.0.0.1:8092 --resources 2000 --rate 5 --seed 2 --via-origin http://origin.example.org/ & pids+=($!)
"$bin" simulate --listen 127.0.0.1:8093 --resources 200 --rate 0.2 --seed 3 --links & pids+=($!)
sleep 1
echo "aggregate: http://127.0.0.1:8080/.well-known/resourcesync   (Ctrl-C to stop)"
"$bin" run "$@"

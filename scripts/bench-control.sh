#!/usr/bin/env bash
# Commands through the running service's control socket against the same commands on the
# stopped store, side by side, over a store of N records (default 1,000,000):
#   - `failures --json`, `provenance URI` and `store stats`: the median wall time of each, from
#     the command's start to its exit (so the offline figure includes opening the store);
#   - `store export`: bytes/s of a hot export (through `tributary serve`) against the offline
#     one;
#   - the harvest throughput of a `tributary run` baselining a simulated Source, with and
#     without a hot export of the N-record store running meanwhile.
#
#   scripts/bench-control.sh [RECORDS] [RUNS]
#
# Environment: PROFILE (cargo profile, default release), PORT (18190). The store is filled once
# (examples/publish_bench.rs `fill`, set `bench`, 2 KiB bitstreams) in a temporary directory.
# Runs alternate offline and online. Prints each run, the medians and the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000000}
runs=${2:-3}
profile=${PROFILE:-release}
port=${PORT:-18190}
work=$(mktemp -d)
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

cargo build --profile "$profile" --quiet --bin tributary --example publish_bench
bin=${CARGO_TARGET_DIR:-target}/$profile
echo "filling a store with $n records of 2 KiB ..."
"$bin/examples/publish_bench" fill "$work/store" "http://127.0.0.1:$port/" "$n" 2048 >/dev/null
cat > "$work/sources.toml" <<TOML
[aggregator]
base_url = "http://127.0.0.1:$port/"
listen = "127.0.0.1:$port"
data_dir = "store"
user_agent = "Tributary-bench/0.1 (+mailto:bench@example.org)"
[[source]]
id = "bench"
url = "http://127.0.0.1:9/"
TOML
t() { "$bin/tributary" --config "$work/sources.toml" "$@"; }
uri=$(t store export - 2>/dev/null | grep -m1 '"kind":"record"' | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["uri"])')
secs() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s.%N); python3 -c "print(round($e - $s, 4))"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
start_serve() {
  t serve 2>"$work/serve.log" & server=$!
  for _ in $(seq 600); do [ -S "$work/store/control.sock" ] && return; sleep 0.1; done
  echo "serve did not start"; cat "$work/serve.log"; exit 1
}
stop_serve() { kill "$server"; wait "$server" 2>/dev/null || true; server=""; }

declare -A off on
names=(failures provenance stats export)
for i in $(seq "$runs"); do
  for mode in off on; do
    [ "$mode" = on ] && start_serve
    f=$(secs t failures --json)
    p=$(secs t provenance "$uri")
    s=$(secs t store stats)
    e=$(secs t store export "$work/export.jsonl")
    bytes=$(stat -c %s "$work/export.jsonl")
    [ "$mode" = on ] && stop_serve
    rate=$(python3 -c "print(round($bytes / $e / 1e6, 1))")
    echo "run $i $mode: failures ${f}s  provenance ${p}s  store stats ${s}s  export ${e}s (${rate} MB/s)"
    if [ "$mode" = off ]; then off[failures]+=" $f"; off[provenance]+=" $p"; off[stats]+=" $s"; off[export]+=" $rate"
    else on[failures]+=" $f"; on[provenance]+=" $p"; on[stats]+=" $s"; on[export]+=" $rate"; fi
  done
done
echo
for k in "${names[@]}"; do
  a=$(median ${off[$k]}); b=$(median ${on[$k]})
  if [ "$k" = export ]; then
    echo "$k: offline $a MB/s, through the service $b MB/s: ratio $(python3 -c "print(round($b / $a, 3))") (target >= 0.8)"
  else
    echo "$k: offline ${a}s, through the service ${b}s: ratio $(python3 -c "print(round($b / $a, 3))") (target <= 1.2)"
  fi
done

# The service's harvest throughput with and without a hot export running: `run` on the same
# store, each measurement a new source (added by `tributary reload`) baselining a simulated
# Source of 60,000 resources; resources/s over 10 s once it is under way.
sim=$((port + 2))
config() {  # the big store's configuration, with source $1 (none when empty)
  cat > "$work/sources.toml" <<TOML
[aggregator]
base_url = "http://127.0.0.1:$port/"
listen = "127.0.0.1:$port"
data_dir = "store"
user_agent = "Tributary-bench/0.1 (+mailto:bench@example.org)"
[[simulate]]
id = "sim"
listen = "127.0.0.1:$sim"
resources = 60000
change_rate = 0.0
seed = 7
[[source]]
id = "bench"
url = "http://127.0.0.1:9/"
poll = "1000h"
TOML
  [ -n "$1" ] && cat >> "$work/sources.toml" <<TOML
[[source]]
id = "$1"
url = "http://127.0.0.1:$sim/.well-known/resourcesync"
allow_private = true
rate = "unlimited"
concurrency = 16
TOML
  return 0
}
live() { curl -sf "http://127.0.0.1:$port/api/status" | python3 -c "import json,sys; print(next((s['resources'] for s in json.load(sys.stdin)['sources'] if s['id']=='$1'), 0))"; }
config ""
t run 2>"$work/run.log" & server=$!
for _ in $(seq 600); do [ -S "$work/store/control.sock" ] && break; sleep 0.1; done
harvest_rate() {  # $1: source id, $2: quiet|export
  config "$1"; t reload >/dev/null
  for _ in $(seq 600); do [ "$(live "$1")" -gt 5000 ] && break; sleep 0.1; done
  local exporter=""
  [ "$2" = export ] && { t store export "$work/export2.jsonl" >/dev/null 2>&1 & exporter=$!; }
  local a b; a=$(live "$1"); sleep 10; b=$(live "$1")
  [ -n "$exporter" ] && wait "$exporter"
  config ""; t reload >/dev/null
  python3 -c "print(round(($b - $a) / 10))"
}
quiet=(); busy=()
for i in $(seq "$runs"); do
  q=$(harvest_rate "q$i" quiet); b=$(harvest_rate "e$i" export)
  echo "harvest run $i: alone $q resources/s, during a hot export $b resources/s"
  quiet+=("$q"); busy+=("$b")
done
q=$(median "${quiet[@]}"); b=$(median "${busy[@]}")
echo "harvest: alone $q/s, during a hot export $b/s: ratio $(python3 -c "print(round($b / $q, 3))") (target >= 0.5)"

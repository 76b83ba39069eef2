#!/usr/bin/env bash
# Resource Dump speed, over real HTTP on 127.0.0.1:
#  1. the first request of a set's resourcedump.xml builds the dump of N resources of 2 KiB
#     (default 100,000; packages of at most 50,000, the Sitemap limit of their manifests):
#     how long that takes; then each package downloaded with curl: MB/s, and the RSS the
#     server adds while serving them (its peak over the start);
#  2. a second Tributary (`tributary harvest`) baselining the same set from its Resource Dump
#     (`dumps = true`) and from its Resource List (`dumps = false`), interleaved, RUNS each,
#     into fresh stores: wall time per pass and the ratio list / dump.
# Prints every run and the medians. The machine may be shared: compare the ratio, and look at
# the spread.
#
#   scripts/bench-dump.sh [RESOURCES] [RUNS]
#
# Environment: PORT (18090), CONCURRENCY (64, the second Tributary's per-host requests),
# BENCH_BIN (the publish_bench binary; default: built from this tree), TRIBUTARY (the binary
# that harvests; default target/release/tributary, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_NUMERIC=C
n=${1:-100000}
runs=${2:-3}
port=${PORT:-18090}
concurrency=${CONCURRENCY:-64}
base="http://127.0.0.1:$port/"
work=$(mktemp -d)
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

bin=${BENCH_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --quiet --example publish_bench
  bin=${CARGO_TARGET_DIR:-target}/release/examples/publish_bench
fi
trib=${TRIBUTARY:-${CARGO_TARGET_DIR:-target}/release/tributary}
[ -x "$trib" ] || cargo build --release --quiet --bin tributary

echo "filling a store with $n resources of 2 KiB ..."
/usr/bin/time -f "fill: %e s, peak RSS %M KiB" "$bin" fill "$work/store" "$base" "$n" 2048
mkfifo "$work/stdin"
"$bin" serve "$work/store" "$base" "127.0.0.1:$port" 50000 1000 < "$work/stdin" &
server=$!
exec 3> "$work/stdin"   # the server runs until this closes
for _ in $(seq 100); do curl -sf -o /dev/null "${base}.well-known/resourcesync" && break; sleep 0.1; done
rss() { awk '/VmRSS/ {print $2}' "/proc/$server/status"; }
hwm() { awk '/VmHWM/ {print $2}' "/proc/$server/status"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# Datetimes are whole seconds, and a harvester reads the changes of its position's second
# again (docs/HARVEST.md, `changes_through`): a dump built in the second the fill ended would
# have the second Tributary re-read every Change Dump package of that second — tens of
# thousands of changes here, where a real Source's history is not two seconds long.
sleep 1
start=$EPOCHREALTIME
curl -sf -o "$work/dump.xml" "${base}sets/bench/resourcedump.xml"
build=$(awk -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN {printf "%.2f", e - s}')
packages=$(grep -o '<loc>[^<]*\.zip</loc>' "$work/dump.xml" | sed 's/<loc>//; s/<\/loc>//')
echo "dump built on first request: ${build} s, $(echo "$packages" | wc -l) packages"

rates=(); added=()
for i in $(seq "$runs"); do
  before=$(rss)
  echo 5 > "/proc/$server/clear_refs"   # reset the peak (VmHWM) to the current RSS
  bytes=0; start=$EPOCHREALTIME
  for p in $packages; do
    b=$(curl -s -o /dev/null -w '%{size_download}' "$p")
    bytes=$((bytes + b))
  done
  end=$EPOCHREALTIME
  rate=$(awk -v b="$bytes" -v s="$start" -v e="$end" 'BEGIN {printf "%.0f", b / (e - s) / 1e6}')
  add=$(( ($(hwm) - before) / 1024 ))
  echo "download $i: $bytes bytes in $(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.3f", e - s}') s = $rate MB/s; server RSS before $before KiB, peak +$add MiB"
  rates+=("$rate"); added+=("$add")
done
echo "packages: median $(median "${rates[@]}") MB/s; RSS added median $(median "${added[@]}") MiB (targets: >= 200 MB/s, < 64 MiB)"

config() { # $1: dumps true|false
  cat > "$work/b.toml" <<TOML
[aggregator]
base_url = "http://127.0.0.1:1/"
data_dir = "$work/b-store"
user_agent = "TributaryBench/0.1 (+mailto:bench@example.org)"
[defaults]
rate = "unlimited"
concurrency = $concurrency
allow_private = true
dumps = $1
[[source]]
id = "a"
url = "${base}.well-known/resourcesync"
capability_list = "${base}sets/bench/capabilitylist.xml"
TOML
}
dump_t=(); list_t=()
for i in $(seq "$runs"); do
  for mode in dump list; do
    [ $mode = dump ] && config true || config false
    rm -rf "$work/b-store"
    start=$EPOCHREALTIME
    RUST_LOG=${BENCH_LOG:-info} "$trib" --config "$work/b.toml" harvest > "$work/summary.txt" 2> "$work/log.txt" || { cat "$work/summary.txt" "$work/log.txt" >&2; exit 1; }
    wall=$(awk -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN {printf "%.3f", e - s}')
    held=$(grep -o 'fetched [0-9]*' "$work/summary.txt" | head -1 | awk '{print $2}')
    echo "baseline from the $mode, run $i: ${wall} s, fetched $held ($(awk -v n="$n" -v w="$wall" 'BEGIN {printf "%.0f", n / w}') resources/s)"
    [ -n "${KEEP_LOGS:-}" ] && cp "$work/log.txt" "$KEEP_LOGS/$mode-$i.log"
    [ $mode = dump ] && dump_t+=("$wall") || list_t+=("$wall")
  done
done
d=$(median "${dump_t[@]}"); l=$(median "${list_t[@]}")
echo "baseline of $n: from the Resource Dump median $d s, from the Resource List median $l s; list / dump $(awk -v a="$l" -v b="$d" 'BEGIN {printf "%.2f", a / b}') (target >= 3)"

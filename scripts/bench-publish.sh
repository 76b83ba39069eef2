#!/usr/bin/env bash
# Publishing speed, over real HTTP on 127.0.0.1:
#  1. a Resource List of N resources (default 100,000) served as an index and its parts:
#     XML throughput per walk and the RSS the server adds while serving it;
#  2. with wrk: requests/s for 2 KiB bitstreams, and for a closed Change List.
# Prints every run and the medians. The machine may be shared: compare medians, and look at
# the spread.
#
#   scripts/bench-publish.sh [RESOURCES] [RUNS]
#
# Needs curl and wrk (Debian: apt-get install -y wrk). The store is filled once per
# invocation (by examples/publish_bench.rs, as the harvester would) in a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000}
runs=${2:-5}
port=${PORT:-18080}
base="http://127.0.0.1:$port/"
events=${EVENTS:-1000}
work=$(mktemp -d)
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
command -v wrk >/dev/null || { echo "wrk not found (apt-get install -y wrk)"; exit 2; }

cargo build --release --quiet --example publish_bench
bin=${CARGO_TARGET_DIR:-target}/release/examples/publish_bench
echo "filling a store with $n resources of 2 KiB ..."
/usr/bin/time -f "fill: %e s, peak RSS %M KiB" "$bin" fill "$work/store" "$base" "$n" 2048

mkfifo "$work/stdin"
"$bin" serve "$work/store" "$base" "127.0.0.1:$port" 50000 "$events" < "$work/stdin" &
server=$!
exec 3> "$work/stdin"   # the server runs until this closes
for _ in $(seq 100); do curl -sf -o /dev/null "${base}.well-known/resourcesync" && break; sleep 0.1; done

rss() { awk '/VmRSS/ {print $2}' "/proc/$server/status"; }
hwm() { awk '/VmHWM/ {print $2}' "/proc/$server/status"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "server RSS after start: $(rss) KiB"
rates=(); added=()
for i in $(seq "$runs"); do
  before=$(rss)
  echo 5 > "/proc/$server/clear_refs"   # reset the peak (VmHWM) to the current RSS
  start=$(date +%s.%N)
  bytes=$(curl -s -o "$work/index.xml" -w '%{size_download}' "${base}sets/bench/resourcelist.xml")
  for part in $(grep -o '<loc>[^<]*' "$work/index.xml" | sed 's/<loc>//'); do
    b=$(curl -s -o /dev/null -w '%{size_download}' "$part")
    bytes=$((bytes + b))
  done
  end=$(date +%s.%N)
  peak=$(hwm)
  rate=$(awk -v b="$bytes" -v s="$start" -v e="$end" 'BEGIN {printf "%.0f", b / (e - s) / 1e6}')
  add=$(( (peak - before) / 1024 ))
  parts=$(grep -c '<loc>' "$work/index.xml")
  echo "walk $i: index + $parts parts, $bytes bytes in $(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.3f", e - s}') s = $rate MB/s; RSS before $before KiB, peak +$add MiB"
  rates+=("$rate"); added+=("$add")
done
echo "resource list: median $(median "${rates[@]}") MB/s (min $(median "$(printf '%s\n' "${rates[@]}" | sort -g | head -1)"), max $(printf '%s\n' "${rates[@]}" | sort -g | tail -1)); added peak RSS median $(median "${added[@]}") MiB, max $(printf '%s\n' "${added[@]}" | sort -g | tail -1) MiB"

# Bitstreams: wrk rotates over 1,000 resources (2 KiB each).
cat > "$work/bits.lua" <<LUA
local i = 0
request = function()
  i = (i + 1) % 1000
  return wrk.format("GET", string.format("/r/bench/http/museum.example.org/collection/object/%08d.xml", i))
end
LUA
closed="${base}sets/bench/changelist-2.xml"
curl -sf -o "$work/closed.xml" "$closed"
echo "closed change list: $(stat -c %s "$work/closed.xml") bytes, $(grep -c '<url>' "$work/closed.xml") entries"
bits=(); cls=()
for i in $(seq "$runs"); do
  b=$(wrk -t1 -c32 -d5s -s "$work/bits.lua" "$base" | awk '/Requests\/sec/ {printf "%.0f", $2}')
  c=$(wrk -t1 -c32 -d5s "$closed" | awk '/Requests\/sec/ {printf "%.0f", $2}')
  echo "wrk run $i: bitstreams $b req/s, closed change list $c req/s"
  bits+=("$b"); cls+=("$c")
done
echo "bitstreams (2 KiB): median $(median "${bits[@]}") req/s; closed change list: median $(median "${cls[@]}") req/s"
echo "server RSS at the end: $(rss) KiB"

#!/usr/bin/env bash
# The metadata store at scale (issue #24's figures), over the real ingest path and real HTTP:
#  1. N records (default 1,000,000) of one source written as the harvester writes them, without
#     fetching (examples/ingest_bench.rs: put a small distinct bitstream, create its record, one
#     durable batch per 1,000, applied while the next fills): records/s per tenth of the run
#     (first vs last), the whole run's rate, bytes the metadata (the database's `meta/`) takes
#     per record, and peak RSS;
#  2. that store served by the publisher (examples/publish_bench.rs serve): the Resource List
#     index and all its parts streamed with curl, MB/s;
#  3. provenance lookups by origin URI (`/provenance?uri=…`, JSON) of random records, one
#     connection, for 10 s with wrk: median and 99th-percentile latency.
#
#   scripts/bench-scale.sh [RECORDS]
#
# Environment: CHAIN=1 (records harvested from another aggregator: upstream ≠ origin), PORT
# (18095), WORK (keep the store there instead of a temporary directory; it takes ~3 KB per
# record), PROFILE (the cargo profile the examples are built with: release, or test-opt for a
# quicker build without LTO), EXAMPLES (a directory holding ingest_bench and publish_bench
# already built, e.g. another build's target/release/examples: nothing is built then). Needs
# curl and wrk.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_NUMERIC=C
n=${1:-1000000}
port=${PORT:-18095}
base="http://127.0.0.1:$port/"
command -v wrk >/dev/null || { echo "wrk not found (apt-get install -y wrk)"; exit 2; }
work=${WORK:-$(mktemp -d)}
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  [ -z "${WORK:-}" ] && rm -rf "$work"
}
trap cleanup EXIT

profile=${PROFILE:-release}
if [ -n "${EXAMPLES:-}" ]; then
  bin=$EXAMPLES
else
  cargo build --profile "$profile" --quiet --example ingest_bench --example publish_bench
  bin=${CARGO_TARGET_DIR:-target}/$profile/examples
fi

rm -rf "$work/store"
echo "ingesting $n records ..."
"$bin/ingest_bench" fill "$work/store" "$base" "$n"

mkfifo "$work/stdin"
"$bin/publish_bench" serve "$work/store" "$base" "127.0.0.1:$port" 50000 1000 < "$work/stdin" &
server=$!
exec 3> "$work/stdin"   # the server runs until this closes
# Opening a large store takes a while (the database replays its journal): wait up to 30 min, and report it.
start=$EPOCHREALTIME
for _ in $(seq 18000); do
  curl -sf -o /dev/null "${base}.well-known/resourcesync" && break
  kill -0 "$server" 2>/dev/null || { echo "the server exited before answering"; exit 1; }
  sleep 0.1
done
curl -sf -o /dev/null "${base}.well-known/resourcesync" || { echo "the server did not answer within 30 min"; exit 1; }
echo "server answering $(awk -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN {printf "%.1f", e - s}') s after it started (opening the store)"

# The server's resident memory (MiB): what a walk of the records leaves resident (STORE.md, "Sizing").
rss() { awk -v k="$1:" '$1 == k { printf "%.0f", $2 / 1024 }' "/proc/$server/status"; }
rss_before=$(rss VmRSS)

# The first request of the index computes the set's partition (one walk of its records).
start=$EPOCHREALTIME
bytes=$(curl -s -o "$work/index.xml" -w '%{size_download}' "${base}sets/bench/resourcelist.xml")
first=$(awk -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN {printf "%.2f", e - s}')
parts=$(grep -o '<loc>[^<]*' "$work/index.xml" | sed 's/<loc>//')
start=$EPOCHREALTIME
for part in $parts; do
  b=$(curl -s -o /dev/null -w '%{size_download}' "$part")
  bytes=$((bytes + b))
done
secs=$(awk -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN {printf "%.2f", e - s}')
echo "resource list: index in $first s (first request), then $(echo "$parts" | wc -l) parts; $bytes bytes in $secs s = $(awk -v b="$bytes" -v s="$secs" 'BEGIN {printf "%.0f", b / s / 1e6}') MB/s"
echo "server RSS: $rss_before MiB before the walk, $(rss VmRSS) MiB after it (peak $(rss VmHWM) MiB)"

cat > "$work/prov.lua" <<LUA
math.randomseed(42)
request = function()
  local k = math.random(0, $n - 1)
  return wrk.format("GET", string.format("/provenance?uri=https://provider.example.org/oai/record/%010d.xml", k))
end
LUA
curl -sf -o /dev/null "${base}provenance?uri=https://provider.example.org/oai/record/0000000000.xml" \
  || { echo "provenance lookup failed"; exit 1; }
wrk -t1 -c1 -d10s --latency -s "$work/prov.lua" "$base" | grep -E "Latency|50%|99%|Requests/sec|Non-2xx"

#!/usr/bin/env bash
# Dashboard speed with 200 sources and 1,000,000 resources in the store.
#
#   scripts/bench-dashboard.sh [RUNS]        (default 20)
#
# 1. Fills a store once (kept in $WORK, default /tmp/tributary-bench-dashboard) through the
#    store API: 200 sources × 5,000 records, each a `created` event in its source's set (the
#    first ten also in a merged set), plus a status row per source (examples/dashboard_bench.rs).
# 2. Serves it with the real binary (`tributary serve`, a sources.toml naming the 200 sources).
# 3. Times the HTML and each JSON endpoint with curl (RUNS requests each, after one warm-up),
#    and /metrics; prints min / median / max of time_total.
# 4. When chromium and chromedriver are on PATH: loads the dashboard RUNS times in headless
#    Chromium and prints the medians of first contentful paint and of the moment the sources
#    table is filled (a performance mark set by web/app.js), both from navigation start.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-20}
SOURCES=${SOURCES:-200}
RESOURCES=${RESOURCES:-1000000}
WORK=${WORK:-/tmp/tributary-bench-dashboard}
PORT=${PORT:-18480}
BASE="http://127.0.0.1:$PORT/"
TARGET=${CARGO_TARGET_DIR:-target}

cargo build --release --quiet --bin tributary --example dashboard_bench
BIN=$TARGET/release/tributary
EX=$TARGET/release/examples/dashboard_bench
mkdir -p "$WORK"

if [ ! -f "$WORK/filled-$SOURCES-$RESOURCES" ]; then
    rm -rf "$WORK/store"
    echo "filling $WORK/store: $SOURCES sources, $RESOURCES resources…"
    /usr/bin/time -f "fill: %e s, peak RSS %M KiB" "$EX" fill "$WORK/store" "$BASE" "$SOURCES" "$RESOURCES"
    touch "$WORK/filled-$SOURCES-$RESOURCES"
fi
du -sh "$WORK/store"

{
    printf '[aggregator]\nbase_url = "%s"\nlisten = "127.0.0.1:%s"\ndata_dir = "store"\n' "$BASE" "$PORT"
    printf 'user_agent = "Tributary-bench/0.1 (+mailto:ops@example.org)"\n\n'
    for i in $(seq 0 $((SOURCES - 1))); do
        printf '[[source]]\nid = "src-%03d"\nurl = "https://src-%03d.example.org/"\n\n' "$i" "$i"
    done
    printf '[[set]]\nid = "sample"\nsources = [%s]\n' "$(for i in $(seq 0 9); do printf '"src-%03d",' "$i"; done | sed 's/,$//')"
} >"$WORK/sources.toml"

"$BIN" --config "$WORK/sources.toml" serve 2>"$WORK/serve.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do curl -sf -o /dev/null "${BASE}api/status" && break; sleep 0.1; done

stats() { sort -n | awk '{a[NR]=$1} END {printf "min %.1f ms, median %.1f ms, max %.1f ms (n=%d)\n", a[1]*1000, a[int((NR+1)/2)]*1000, a[NR]*1000, NR}'; }
for path in "" "dashboard/app.js" "api/status" "api/changes?limit=25" "metrics"; do
    curl -s -o /dev/null "$BASE$path"
    printf '%-22s %8s bytes  ' "/$path" "$(curl -s "$BASE$path" | wc -c)"
    for _ in $(seq 1 "$RUNS"); do curl -s -o /dev/null -w '%{time_total}\n' "$BASE$path"; done | stats
done

if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    "$EX" browse "$BASE" "$RUNS"
else
    echo "chromium/chromedriver not installed: browser timings skipped (apt-get install chromium chromium-driver)"
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

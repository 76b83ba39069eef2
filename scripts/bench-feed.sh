#!/usr/bin/env bash
# FeedSync feed parsing speed: Tributary's read_feed against Python's feedparser, on the same
# file in the same run.
#  1. `feed_bench gen` writes a FeedSync Atom feed of N entries (default 10,000) through
#     Tributary's AtomWriter: titles, links, summaries, sx:sync with three sx:history each,
#     a tombstone in ten, a conflict in fifty;
#  2. `feed_bench parse` times read_feed over it RUNS times (in memory; the median);
#  3. feedparser.parse times the same file RUNS times (from a bytes object read beforehand,
#     so neither side pays for the disk; the median).
# Both rates count the N top-level entries. Prints both items/s and the ratio. The machine
# may be shared: compare the ratio, and run it more than once.
#
#   scripts/bench-feed.sh [ITEMS] [RUNS]
#
# Environment: BENCH_BIN (the feed_bench binary; default: built with --release from this
# tree), PYTHON (default: .ci/venv/bin/python3 when present, else python3; it must import
# feedparser, which .ci/setup installs).
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_NUMERIC=C
n=${1:-10000}
runs=${2:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bin=${BENCH_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --quiet --example feed_bench
  bin=${CARGO_TARGET_DIR:-target}/release/examples/feed_bench
fi
python=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x .ci/venv/bin/python3 ] && python=.ci/venv/bin/python3
"$python" -c 'import feedparser' || { echo "bench-feed: $python cannot import feedparser; run .ci/setup" >&2; exit 1; }

feed="$work/feed.xml"
"$bin" gen "$feed" "$n"
echo "feed: $n entries, $(($(stat -c %s "$feed") / 1024)) KiB"

rust=$("$bin" parse "$feed" "$runs" | tee /dev/stderr | awk '/^items\/s/ {print $2}')
py=$("$python" - "$feed" "$n" "$runs" <<'PY'
import sys, time, statistics, feedparser
path, n, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = open(path, "rb").read()
rates = []
for run in range(1, runs + 1):
    t = time.perf_counter()
    d = feedparser.parse(data)
    secs = time.perf_counter() - t
    if d.bozo:
        sys.exit(f"feedparser: bozo: {d.bozo_exception}")
    rates.append(n / secs)
    print(f"feedparser run {run}: {len(d.entries)} entries (conflicts included) in {secs * 1000:.0f} ms: {n / secs:.0f} items/s", file=sys.stderr)
print(f"{statistics.median(rates):.0f}")
PY
)
echo "tributary  items/s $rust"
echo "feedparser items/s $py"
awk -v r="$rust" -v p="$py" 'BEGIN { printf "ratio tributary/feedparser %.1f\n", r / p }'

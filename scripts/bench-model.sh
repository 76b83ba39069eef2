#!/usr/bin/env bash
# Parse speed and memory of `tributary check` on a 50,000-entry Resource List (~14 MB, with
# lastmod, md5 + sha-256, length and type per entry), side by side with the Python reference
# client (`resync`) parsing and writing the same file. Prints medians and the ratio.
#
#   scripts/bench-model.sh [RUNS]
#
# The in-process figures (no process start-up or file I/O) come from
# `cargo bench --bench model`, which also measures bare quick-xml scanning and writing.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-7}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cargo build --release --quiet --bin tributary --example gen_list
target=${CARGO_TARGET_DIR:-target}
"$target/release/examples/gen_list" 50000 > "$work/rl.xml"
echo "file: $(stat -c %s "$work/rl.xml") bytes, 50000 entries"

times=(); rss=()
for _ in $(seq "$runs"); do
  /usr/bin/time -f "%e %M" -o "$work/t" "$target/release/tributary" check --quiet "$work/rl.xml" > "$work/out"
  read -r t m < "$work/t"; times+=("$t"); rss+=("$m")
done
grep -q "0 errors" "$work/out" || { cat "$work/out"; exit 1; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
t=$(median "${times[@]}"); m=$(median "${rss[@]}")
rate=$(awk -v t="$t" 'BEGIN {printf "%.0f", 50000 / t}')
echo "tributary check: median ${t}s over $runs runs = ${rate} entries/s (whole process), peak RSS ${m} KiB"

python3 -c 'import resync' 2>/dev/null || python3 -m pip install --quiet resync
# The reference client parses then writes the same list; the best of two runs of each is
# kept (it takes tens of seconds per run, so medians over $runs would take minutes).
read -r py_read py_write < <(python3 - "$work/rl.xml" <<'PY'
import sys, time
from resync.resource_list import ResourceList
best_r = best_w = 0.0
for _ in range(2):
    t = time.perf_counter()
    rl = ResourceList()
    rl.parse(uri=sys.argv[1])
    best_r = max(best_r, len(rl) / (time.perf_counter() - t))
    t = time.perf_counter()
    rl.as_xml()
    best_w = max(best_w, len(rl) / (time.perf_counter() - t))
print(f"{best_r:.0f} {best_w:.0f}")
PY
)
echo "resync (Python reference client) ResourceList.parse: ${py_read} entries/s, as_xml: ${py_write} entries/s"
awk -v a="$rate" -v b="$py_read" 'BEGIN {printf "ratio tributary check / resync parse: %.1fx\n", a / b}'
echo "in-process read+validate, read-only, bare quick-xml and write: cargo bench --bench model"

#!/usr/bin/env bash
# OAI-PMH harvest speed: Tributary against the Python harvester Sickle, on the same
# pre-rendered pages in the same run (issue #37, "Speed").
#  1. scripts/bench-oai-harvest.py writes N oai_dc records (default 100,000; ~0.8 KiB each) as static
#     ListRecords pages of PER_PAGE records (default 500) with resumption tokens, and the pages
#     of an incremental list holding CHANGED of them revised (default 1%);
#  2. it serves them on 127.0.0.1 (a token names its file: nothing is rendered per request);
#  3. each run: `tributary harvest` on a fresh store (the baseline: parse, hash, store), Sickle
#     iterating the same list (records/s), then `tributary harvest` again: the incremental
#     poll, whose `from` gets the CHANGED records. For both harvests: the pass's duration as
#     the summary prints it (the harvest), and the process's wall time (plus opening and
#     closing the store, about half a second for 100,000 records, whatever the poll does).
# Prints every run, then the medians: Tributary's records/s (pass) over Sickle's, and the
# incremental poll's time as a share of the baseline's, by pass and by process. The machine
# may be shared: compare ratios, and run it more than once.
#
#   scripts/bench-oai-harvest.sh [RUNS]
#
# Environment: N, PER_PAGE, CHANGED, CACHE_MB (store_cache_mb; default the binary's), TRIBUTARY (binary; default $CARGO_TARGET_DIR/release/
# tributary, built with --release when missing), PYTHON (default: .ci/venv/bin/python3 when
# present, else python3; it must import sickle, which .ci/setup installs).
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_NUMERIC=C
runs=${1:-3}
n=${N:-100000}
per_page=${PER_PAGE:-500}
changed=${CHANGED:-$((n / 100))}
bin=${TRIBUTARY:-${CARGO_TARGET_DIR:-target}/release/tributary}
[ -x "$bin" ] || cargo build --release --quiet
python=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x .ci/venv/bin/python3 ] && python=.ci/venv/bin/python3
"$python" -c 'import sickle' || { echo "bench-oai: $python cannot import sickle; run .ci/setup" >&2; exit 1; }

work=$(mktemp -d /tmp/bench-oai.XXXXXX)
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$python" scripts/bench-oai-harvest.py gen "$work/pages" "$n" "$per_page" "$changed"
echo "pages: $n records, $per_page a page, $(du -sm "$work/pages" | cut -f1) MiB; incremental: $changed changed"
"$python" scripts/bench-oai-harvest.py serve "$work/pages" >"$work/port" &
server=$!
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
base="http://127.0.0.1:$(cat "$work/port")/oai"

cat >"$work/bench.toml" <<TOML
[aggregator]
base_url = "http://127.0.0.1:8080/"
data_dir = "store"
user_agent = "TributaryBench/0.1 (+mailto:ops@example.org)"
${CACHE_MB:+store_cache_mb = $CACHE_MB}

[defaults]
rate = "unlimited"
allow_private = true

[[source]]
id = "bench"
oai = "$base"
TOML

# Wall seconds of a command; its output is left in $work/stdout.
wall() {
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >"$work/stdout" 2>"$work/stderr" || { cat "$work/stdout" "$work/stderr" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}

harvest() { "$bin" --config "$work/bench.toml" --data-dir "$work/store" harvest; }
# The pass's duration from the summary in $work/stdout ("… bytes in 1.23s …").
pass() { grep -o ' in [0-9.]*s' "$work/stdout" | head -1 | tr -dc '0-9.'; }

: >"$work/runs"
for run in $(seq "$runs"); do
  rm -rf "$work/store"
  base_s=$(wall harvest)
  grep -q "fetched $n," "$work/stdout" || { echo "bench-oai: the baseline did not fetch $n:" >&2; cat "$work/stdout" >&2; exit 1; }
  base_p=$(pass)
  read -r sickle_rate sickle_s < <("$python" scripts/bench-oai-harvest.py sickle "$base" "$n")
  incr_s=$(wall harvest)
  grep -q "fetched $changed," "$work/stdout" || { echo "bench-oai: the incremental poll did not fetch $changed:" >&2; cat "$work/stdout" >&2; exit 1; }
  incr_p=$(pass)
  trib_rate=$(awk -v n="$n" -v s="$base_p" 'BEGIN { printf "%.0f", n / s }')
  echo "run $run: tributary baseline pass ${base_p}s (${trib_rate} records/s; process ${base_s}s), sickle ${sickle_s}s (${sickle_rate} records/s), tributary incremental pass ${incr_p}s (process ${incr_s}s)"
  echo "$trib_rate $sickle_rate $base_p $incr_p $base_s $incr_s" >>"$work/runs"
done

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratios=$(awk '{ printf "%.2f\n", $1 / $2 }' "$work/runs" | median)
shares=$(awk '{ printf "%.2f\n", 100 * $4 / $3 }' "$work/runs" | median)
process=$(awk '{ printf "%.2f\n", 100 * $6 / $5 }' "$work/runs" | median)
echo "tributary baseline records/s (median) $(cut -d' ' -f1 "$work/runs" | median)"
echo "sickle records/s (median)             $(cut -d' ' -f2 "$work/runs" | median)"
echo "ratio tributary/sickle (median)       $ratios"
echo "incremental/baseline, pass (median)   ${shares}%"
echo "incremental/baseline, process (median) ${process}%"

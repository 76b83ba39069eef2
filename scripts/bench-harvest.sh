#!/usr/bin/env bash
# Baseline harvest benchmark: 10,000 resources of 1–4 KiB served by a local nginx on
# 127.0.0.1, harvested by `tributary harvest` with rate limits lifted (verified against md5
# and sha-256, committed to a fresh store), then by the Python reference client
# `resync-sync --baseline` on the same files, alternating with it run by run. Prints
# resources/s and peak RSS (medians over RUNS runs), each run's ratio and their median.
#
# Then the floor: the two halves of the harvest alone (examples/harvest_floor.rs: reqwest
# fetching every file and dropping it; the store putting and committing them from memory),
# with the CPU-seconds each costs and nginx's share: their sum over the cores bounds what any
# harvest built from these parts can reach on this machine.
#
# Usage: scripts/bench-harvest.sh [RUNS]     env: N (resources, 10000), PORT (8099),
#        CONCURRENCY (64), SETUP_ONLY=1 (start nginx, print WORK, exit), FLOOR=0 (skip the floor),
#        TRIBUTARY (binary; default target/release/tributary, built if missing),
#        COMPARE (a second tributary binary, e.g. an older build: each run then makes one pass
#        with each, interleaved, and the medians and their ratio are printed for both)
# Needs: nginx (apt-get install -y nginx), python3 with resync (pip install resync), /usr/bin/time.
set -euo pipefail
export LC_NUMERIC=C # $EPOCHREALTIME with a decimal point, as awk reads it

RUNS=${1:-3}
N=${N:-10000}
PORT=${PORT:-8099}
CONCURRENCY=${CONCURRENCY:-64}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${TRIBUTARY:-$TARGET/release/tributary}
WORK=$(mktemp -d /tmp/bench-harvest.XXXXXX)
BASE="http://127.0.0.1:$PORT"

# The files nginx serves and the Python client's copies of them go to tmpfs (/dev/shm) when
# there is one; only the stores are on disk, in WORK. On ext4 without a journal (this
# machine's disk), files deleted in the last one to five minutes slow every new file: the
# inode allocator skips inodes freed that recently (`recently_deleted`). With the client's
# copies on ext4, each of its passes deleted the previous pass's 10,000 files first, and
# scanning past them took 44% of its samples (`perf record`) and cut it from ~1,500/s to
# ~650/s by its third pass; the site's 10,000 files, deleted by this script's cleanup, did the
# same to the next run's stores (about 2% of a Tributary pass). On tmpfs there is no such scan,
# and the client runs as fast as in a fresh ext4 directory (8.1 vs 7.5 s a pass).
if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs && -w /dev/shm ]]; then
    SCRATCH=$(mktemp -d /dev/shm/bench-harvest.XXXXXX)
else
    echo "no tmpfs at /dev/shm: the site and resync-sync's copies go to $WORK on disk" >&2
    SCRATCH=$WORK
fi
chmod 755 "$SCRATCH" # nginx workers run unprivileged and must read the site

cleanup() {
    if [[ -f $WORK/nginx.pid ]]; then kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true; fi
    rm -rf "$WORK" "$SCRATCH"
}
trap cleanup EXIT

command -v nginx >/dev/null || { echo "nginx missing: apt-get install -y nginx" >&2; exit 2; }
python3 -c 'import resync' || { echo "resync missing: pip install resync" >&2; exit 2; }
[[ -x $BIN ]] || (cd "$ROOT" && cargo build --release --bin tributary)
FLOOR_BIN=$TARGET/release/examples/harvest_floor
if [[ ${FLOOR:-1} == 1 ]]; then (cd "$ROOT" && cargo build --release --example harvest_floor); fi

echo "== generating $N files of 1-4 KiB in $SCRATCH/site"
python3 - "$SCRATCH/site/files" "$N" <<'EOF'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(42)
for i in range(n):
    d = os.path.join(root, f"{i // 1000:02d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"r{i:05d}.bin"), "wb") as f:
        f.write(rng.randbytes(rng.randint(1024, 4096)))
EOF
(cd "$SCRATCH/site" &&
    resync-build --write-resourcelist --hash md5 --hash sha-256 --capabilitylist-link "$BASE/capabilitylist.xml" \
        --outfile resourcelist.xml "$BASE/files/=files" &&
    resync-build --write-capabilitylist "resourcelist=$BASE/resourcelist.xml" \
        --sourcedescription-link "$BASE/.well-known/resourcesync" --outfile capabilitylist.xml &&
    mkdir -p .well-known &&
    resync-build --write-sourcedescription "$BASE/capabilitylist.xml" --outfile .well-known/resourcesync) 2>/dev/null

echo "== starting nginx on 127.0.0.1:$PORT"
mkdir -p "$WORK/nginx/logs"
cat >"$WORK/nginx.conf" <<EOF
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    keepalive_requests 100000;
    types { application/xml xml; }
    default_type application/octet-stream;
    server {
        listen 127.0.0.1:$PORT;
        root $SCRATCH/site;
        location = /.well-known/resourcesync { default_type application/xml; }
    }
}
EOF
nginx -p "$WORK/nginx" -c "$WORK/nginx.conf"
for _ in $(seq 50); do curl -sf "$BASE/resourcelist.xml" -o /dev/null && break; sleep 0.1; done

cat >"$WORK/sources.toml" <<EOF
[aggregator]
base_url = "http://127.0.0.1:8080/"
listen = "127.0.0.1:8080"
data_dir = "store"
user_agent = "TributaryBench/0.1 (+mailto:ops@example.org)"

[defaults]
rate = "unlimited"
concurrency = $CONCURRENCY

[[source]]
id = "bench"
url = "$BASE/.well-known/resourcesync"
allow_private = true
EOF

if [[ ${SETUP_ONLY:-0} == 1 ]]; then
    # For profiling: leave nginx and the files in place (stop with: kill $(cat $WORK/nginx.pid);
    # then remove WORK and the site's directory).
    trap - EXIT
    echo "SITE=$SCRATCH/site"
    echo "WORK=$WORK"
    exit 0
fi

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# CPU-seconds (user + system) nginx's worker has used so far.
nginx_cpu() {
    local worker
    worker=$(pgrep -P "$(cat "$WORK/nginx.pid")" | head -1)
    awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$worker/stat"
}

: >"$WORK/ratio"; : >"$WORK/trib.rate"; : >"$WORK/trib.rss"; : >"$WORK/trib.cpu"; : >"$WORK/trib.nginx"; : >"$WORK/cmp.rate"
: >"$WORK/floor.fetch"; : >"$WORK/floor.nginx"; : >"$WORK/floor.store"
# One baseline pass of binary $1 into a fresh store; appends its rate to $WORK/$2.rate (and, for
# the main binary, RSS and CPU to the other files).
pass() {
    local bin=$1 tag=$2 run=$3
    rm -rf "$WORK/store"
    before=$(nginx_cpu)
    # Wall time from the clock around the run: time(1)'s own is in hundredths of a second,
    # 1.4% of a 0.7 s pass. bash's own clock, not date(1): starting a process after the run
    # would count its start-up too.
    start=$EPOCHREALTIME
    /usr/bin/time -v -o "$WORK/time.txt" "$bin" --config "$WORK/sources.toml" --data-dir "$WORK/store" \
        harvest >"$WORK/summary.txt" 2>"$WORK/log.txt" || { cat "$WORK/summary.txt" "$WORK/log.txt" >&2; exit 1; }
    end=$EPOCHREALTIME
    ngx=$(awk -v a="$before" -v b="$(nginx_cpu)" 'BEGIN {printf "%.2f", b - a}')
    wall=$(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.3f", e - s}')
    rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2/1024}' "$WORK/time.txt")
    cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {printf "%.2f", s}' "$WORK/time.txt")
    fetched=$(grep -o 'fetched [0-9]*' "$WORK/summary.txt" | head -1 | awk '{print $2}')
    [[ $fetched == "$N" ]] || { echo "run $run fetched $fetched of $N" >&2; cat "$WORK/summary.txt" >&2; exit 1; }
    rate=$(awk -v n="$N" -v w="$wall" 'BEGIN {printf "%.0f", n / w}')
    echo "$tag run $run: $(head -1 "$WORK/summary.txt")"
    echo "$tag run $run: process wall ${wall}s, ${rate} resources/s end to end, peak RSS ${rss} MiB, CPU ${cpu}s (nginx ${ngx}s)"
    echo "$rate" >>"$WORK/$tag.rate"
    if [[ $tag == trib ]]; then
        echo "$rss" >>"$WORK/trib.rss"; echo "$cpu" >>"$WORK/trib.cpu"; echo "$ngx" >>"$WORK/trib.nginx"
    fi
}
# One pass of the Python client into a directory of its own. On tmpfs the previous one is
# deleted first, to bound the memory; on disk that would slow this pass (above).
: >"$WORK/py.rate"
py_pass() {
    local run=$1 dst=$SCRATCH/dst.$1
    if [[ $SCRATCH != "$WORK" ]]; then rm -rf "$SCRATCH/dst.$((run - 1))"; fi
    mkdir -p "$dst"
    start=$EPOCHREALTIME
    resync-sync --baseline --hash md5 --noauth --sitemap "$BASE/resourcelist.xml" "$BASE/files/=$dst" >/dev/null 2>&1
    end=$EPOCHREALTIME
    got=$(find "$dst" -type f | wc -l)
    rate=$(awk -v n="$got" -v s="$start" -v e="$end" 'BEGIN {printf "%.0f", n / (e - s)}')
    echo "resync-sync run $run: $got files in $(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.2f", e - s}')s, $rate resources/s"
    echo "$rate" >>"$WORK/py.rate"
}
for run in $(seq "$RUNS"); do
    # Alternating which goes first, so neither always meets the machine right after the other;
    # the Python client in the same run, so each ratio compares passes of one moment.
    if [[ $((run % 2)) == 0 ]]; then py_pass "$run"; fi
    if [[ -n ${COMPARE:-} && $((run % 2)) == 0 ]]; then pass "$COMPARE" cmp "$run"; fi
    pass "$BIN" trib "$run"
    if [[ -n ${COMPARE:-} && $((run % 2)) == 1 ]]; then pass "$COMPARE" cmp "$run"; fi
    if [[ $((run % 2)) == 1 ]]; then py_pass "$run"; fi
    awk -v t="$(tail -1 "$WORK/trib.rate")" -v p="$(tail -1 "$WORK/py.rate")" 'BEGIN {printf "%.2f\n", t / p}' >>"$WORK/ratio"
    echo "run $run: Tributary / resync-sync $(tail -1 "$WORK/ratio")x"
    # The floor right after each pass, so both see the same phase of this shared machine.
    if [[ ${FLOOR:-1} == 1 ]]; then
        before=$(nginx_cpu)
        out=$("$FLOOR_BIN" fetch "$BASE/resourcelist.xml" "$CONCURRENCY")
        ngx=$(awk -v a="$before" -v b="$(nginx_cpu)" 'BEGIN {printf "%.2f", b - a}')
        echo "floor run $run: $out (nginx ${ngx}s)"
        grep -o 'cpu_s=[0-9.]*' <<<"$out" | cut -d= -f2 >>"$WORK/floor.fetch"; echo "$ngx" >>"$WORK/floor.nginx"
        rm -rf "$WORK/floor-store"
        out=$("$FLOOR_BIN" store "$SCRATCH/site" "$WORK/floor-store" | tail -1)
        echo "floor run $run: $out"
        grep -o 'cpu_s=[0-9.]*' <<<"$out" | cut -d= -f2 >>"$WORK/floor.store"
    fi
done



t=$(median <"$WORK/trib.rate"); r=$(median <"$WORK/trib.rss"); p=$(median <"$WORK/py.rate")
c=$(median <"$WORK/trib.cpu"); g=$(median <"$WORK/trib.nginx")
echo
echo "median over $RUNS runs, $N resources:"
echo "  tributary harvest:     $t resources/s, peak RSS $r MiB (targets: >= 15000/s, < 100 MiB)"
echo "                         passes at or above 15000/s: $(awk '$1 >= 15000' "$WORK/trib.rate" | wc -l) of $RUNS"
echo "                         CPU ${c}s per pass, nginx ${g}s"
if [[ -n ${COMPARE:-} ]]; then
    k=$(median <"$WORK/cmp.rate")
    echo "  $COMPARE: $k resources/s (this build / it: $(awk -v a="$t" -v b="$k" 'BEGIN {printf "%.2f", a / b}'))"
fi
echo "  resync-sync --baseline: $p resources/s"
echo "  ratio of the medians: $(awk -v a="$t" -v b="$p" 'BEGIN {printf "%.1f", a / b}')x;" \
    "median of the runs' ratios: $(median <"$WORK/ratio")x ($(sort -g "$WORK/ratio" | paste -sd' '))"
if [[ ${FLOOR:-1} == 1 ]]; then
    f=$(median <"$WORK/floor.fetch"); fg=$(median <"$WORK/floor.nginx"); st=$(median <"$WORK/floor.store")
    cores=$(nproc)
    echo "  floor: fetching alone ${f}s CPU + nginx ${fg}s + storing alone ${st}s = $(awk -v a="$f" -v b="$fg" -v c="$st" 'BEGIN {printf "%.2f", a + b + c}')s CPU;"
    bound=$(awk -v n="$N" -v a="$f" -v b="$fg" -v c="$st" -v k="$cores" 'BEGIN {printf "%.0f", n / ((a + b + c) / k)}')
    echo "         on $cores cores no harvest from these parts beats $bound resources/s;"
    # The share of the floor is what compares across phases of a shared machine: the rate
    # itself moves with the host's load (up to half between runs), the share much less.
    echo "         the harvest reached $(awk -v t="$t" -v b="$bound" 'BEGIN {printf "%.0f", 100 * t / b}')% of it"
fi

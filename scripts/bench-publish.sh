#!/usr/bin/env bash
# Publishing speed, over real HTTP on 127.0.0.1:
#  1. a Resource List of N resources (default 100,000) served as an index and its parts:
#     XML throughput per walk and the RSS the server adds while serving it;
#  2. with wrk: requests/s for 2 KiB bitstreams, and for a closed Change List;
#  3. when nginx is installed, the same two files served by nginx as static files, with the
#     same wrk settings in the same run, interleaved with Tributary's runs (the peer for scale).
# Prints every run and the medians. The machine may be shared: compare medians, and look at
# the spread.
#
#   scripts/bench-publish.sh [RESOURCES] [RUNS]
#
# Environment: CACHE_MB (the store's block cache, default 16), NO_LINKS=1 (republish no inherited
# links), EVENTS (Change List size, default 1000), WALK_ONLY=1 (skip wrk), PORT (18080),
# BENCH_BIN (the publish_bench binary; default: built from this tree — point it at another
# build's target/release/examples/publish_bench to measure that build, e.g. before a change).
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

bin=${BENCH_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --quiet --example publish_bench
  bin=${CARGO_TARGET_DIR:-target}/release/examples/publish_bench
fi
echo "filling a store with $n resources of 2 KiB ..."
/usr/bin/time -f "fill: %e s, peak RSS %M KiB" "$bin" fill "$work/store" "$base" "$n" 2048

mkfifo "$work/stdin"
"$bin" serve "$work/store" "$base" "127.0.0.1:$port" 50000 "$events" < "$work/stdin" &
server=$!
exec 3> "$work/stdin"   # the server runs until this closes
for _ in $(seq 100); do curl -sf -o /dev/null "${base}.well-known/resourcesync" && break; sleep 0.1; done

rss() { awk '/VmRSS/ {print $2}' "/proc/$server/status"; }
# CPU seconds the server has used (user + system): throughput per CPU-second is what the code
# costs, whatever else the shared machine is doing.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.3f", ($14 + $15) / hz}' "/proc/$server/stat"; }
hwm() { awk '/VmHWM/ {print $2}' "/proc/$server/status"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "server RSS after start: $(rss) KiB"
rates=(); added=(); percpu=()
for i in $(seq "$runs"); do
  before=$(rss)
  cpu0=$(cpu)
  echo 5 > "/proc/$server/clear_refs"   # reset the peak (VmHWM) to the current RSS
  start=$(date +%s.%N)
  bytes=$(curl -s -o "$work/index.xml" -w '%{size_download}' "${base}sets/bench/resourcelist.xml")
  parts_of=""   # a single list (N within the part limit) has no parts to walk
  grep -q '<sitemapindex' "$work/index.xml" && parts_of=$(grep -o '<loc>[^<]*' "$work/index.xml" | sed 's/<loc>//')
  for part in $parts_of; do
    b=$(curl -s -o /dev/null -w '%{size_download}' "$part")
    bytes=$((bytes + b))
  done
  end=$(date +%s.%N)
  cpu1=$(cpu)
  peak=$(hwm)
  pc=$(awk -v b="$bytes" -v c0="$cpu0" -v c1="$cpu1" 'BEGIN {printf "%.0f", b / (c1 - c0) / 1e6}')
  rate=$(awk -v b="$bytes" -v s="$start" -v e="$end" 'BEGIN {printf "%.0f", b / (e - s) / 1e6}')
  add=$(( (peak - before) / 1024 ))
  parts=$(printf '%s' "$parts_of" | grep -c . || true)
  echo "walk $i: index + $parts parts, $bytes bytes in $(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.3f", e - s}') s = $rate MB/s ($pc MB per server CPU-second); RSS before $before KiB, peak +$add MiB"
  rates+=("$rate"); added+=("$add"); percpu+=("$pc")
done
lo() { printf '%s\n' "$@" | sort -g | head -1; }
hi() { printf '%s\n' "$@" | sort -g | tail -1; }
echo "resource list: median $(median "${rates[@]}") MB/s wall (min $(lo "${rates[@]}"), max $(hi "${rates[@]}")), median $(median "${percpu[@]}") MB per server CPU-second; added peak RSS median $(median "${added[@]}") MiB, max $(hi "${added[@]}") MiB (the first, cold walk includes filling the store's page cache)"

[ "${WALK_ONLY:-0}" = 1 ] && exit 0

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
echo "gzip-compressed: $(curl -s -H 'Accept-Encoding: gzip' -o /dev/null -w '%{size_download}' "$closed") bytes"
# nginx as the static-file yardstick: the same bytes Tributary serves, from disk.
nginx_port=$((port + 1)); nginx_base=""; nginx=""
if command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; then
  mkdir -p "$work/nginx/html" "$work/nginx/logs"
  cp "$work/closed.xml" "$work/nginx/html/closed.xml"
  curl -sf -o "$work/nginx/html/bit.xml" "${base}r/bench/http/museum.example.org/collection/object/00000001.xml"
  cat > "$work/nginx/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1; pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log;
events { worker_connections 256; }
http { access_log off; sendfile on; tcp_nopush on; keepalive_requests 100000;
  types { application/xml xml; }
  server { listen 127.0.0.1:$nginx_port; root $work/nginx/html; } }
CONF
  "$(command -v nginx || echo /usr/sbin/nginx)" -p "$work/nginx" -c "$work/nginx/nginx.conf" &
  nginx=$!
  nginx_base="http://127.0.0.1:$nginx_port/"
  for _ in $(seq 50); do curl -sf -o /dev/null "${nginx_base}bit.xml" && break; sleep 0.1; done
fi
stop_nginx() { [ -n "$nginx" ] && kill "$nginx" 2>/dev/null || true; }
trap 'stop_nginx; cleanup' EXIT

bits=(); cls=(); gzs=(); nbits=(); ncls=()
for i in $(seq "$runs"); do
  if [ -n "$nginx_base" ]; then
    nb=$(wrk -t1 -c32 -d5s "${nginx_base}bit.xml" | awk '/Requests\/sec/ {printf "%.0f", $2}')
    nc=$(wrk -t1 -c32 -d5s "${nginx_base}closed.xml" | awk '/Requests\/sec/ {printf "%.0f", $2}')
    echo "nginx run $i: 2 KiB file $nb req/s, closed change list file $nc req/s"
    nbits+=("$nb"); ncls+=("$nc")
  fi
  b=$(wrk -t1 -c32 -d5s -s "$work/bits.lua" "$base" | awk '/Requests\/sec/ {printf "%.0f", $2}')
  c=$(wrk -t1 -c32 -d5s "$closed" | awk '/Requests\/sec/ {printf "%.0f", $2}')
  g=$(wrk -t1 -c32 -d5s -H 'Accept-Encoding: gzip' "$closed" | awk '/Requests\/sec/ {printf "%.0f", $2}')
  echo "wrk run $i: bitstreams $b req/s, closed change list $c req/s (gzip: $g req/s)"
  bits+=("$b"); cls+=("$c"); gzs+=("$g")
done
echo "bitstreams (2 KiB): median $(median "${bits[@]}") req/s (min $(lo "${bits[@]}"), max $(hi "${bits[@]}")); closed change list: median $(median "${cls[@]}") req/s (min $(lo "${cls[@]}"), max $(hi "${cls[@]}")), gzip median $(median "${gzs[@]}") req/s"
if [ -n "$nginx_base" ]; then
  echo "nginx (static files, same run): 2 KiB median $(median "${nbits[@]}") req/s; closed change list median $(median "${ncls[@]}") req/s"
  echo "ratio Tributary/nginx: bitstreams $(awk -v a="$(median "${bits[@]}")" -v b="$(median "${nbits[@]}")" 'BEGIN {printf "%.2f", a / b}'), closed change list $(awk -v a="$(median "${cls[@]}")" -v b="$(median "${ncls[@]}")" 'BEGIN {printf "%.2f", a / b}')"
fi
echo "server RSS at the end: $(rss) KiB"

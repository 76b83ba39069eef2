#!/usr/bin/env bash
# OAI-PMH ListRecords over N records (default 1,000,000), paged to the end by a client on the
# same machine (scripts/bench-oai-client.py: one keep-alive connection, following tokens),
# against nginx serving the same pages pre-rendered as static files, in the same run. Prints
# each run, the medians and the ratio, and the RSS the server added while serving a list.
#
#   scripts/bench-oai-serve.sh [RECORDS] [RUNS]
#
# Environment: PAGE (records per page, default 500, the endpoint's default), PORT (18090),
# PROFILE (cargo profile of the server, default release), CACHE_MB (store block cache, default 16).
# The store is filled once per invocation (examples/publish_bench.rs `fill`: 2 KiB bitstreams,
# one `created` event each, as the harvester writes them) in a temporary directory; the first
# Tributary run saves its pages for nginx. The RSS growth of each run is shown with how much of
# it is the store's block cache filling (bounded by CACHE_MB).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000000}
runs=${2:-3}
page=${PAGE:-500}
port=${PORT:-18090}
profile=${PROFILE:-release}
base="http://127.0.0.1:$port/"
work=$(mktemp -d)
server=""; nginx=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  [ -n "$nginx" ] && kill "$nginx" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { echo "nginx not found (apt-get install -y nginx)"; exit 2; }

cargo build --profile "$profile" --quiet --example publish_bench --example oai_bench
dir=${CARGO_TARGET_DIR:-target}/$profile/examples
echo "filling a store with $n records of 2 KiB ..."
/usr/bin/time -f "fill: %e s" "$dir/publish_bench" fill "$work/store" "$base" "$n" 2048

mkfifo "$work/stdin"
CACHE_STAT="$work/cache" "$dir/oai_bench" "$work/store" "$base" "127.0.0.1:$port" "$page" < "$work/stdin" &
server=$!
exec 3> "$work/stdin"   # the server runs until this closes
for _ in $(seq 100); do curl -sf -o /dev/null "${base}oai?verb=Identify" && break; sleep 0.1; done
rss() { awk '/VmRSS/ {print $2}' "/proc/$server/status"; }
cache() { local b; b=$(cat "$work/cache" 2>/dev/null); echo "${b:-0}"; }   # bytes in the store's block cache
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

mkdir -p "$work/nginx/html" "$work/nginx/logs"
cat > "$work/nginx/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1; pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log;
events { worker_connections 64; }
http { access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000;
  types { text/xml xml; }
  server { listen 127.0.0.1:$((port + 1)); root $work/nginx/html; } }
CONF

client() { python3 scripts/bench-oai-client.py "$@"; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])['$1'])" "$2"; }
ours=(); theirs=(); ratios=(); grew=(); cached=()
for i in $(seq "$runs"); do
  before=$(rss); peak=$before; cache0=$(cache)
  save=""; [ "$i" = 1 ] && save="$work/nginx/html"
  client oai 127.0.0.1 "$port" /oai $save > "$work/out" &
  c=$!
  while kill -0 "$c" 2>/dev/null; do r=$(rss); [ "$r" -gt "$peak" ] && peak=$r; sleep 0.2; done
  wait "$c"
  sleep 0.2   # the cache figure is written every 100 ms
  dcache=$(( ($(cache) - cache0) / 1048576 ))
  t=$(cat "$work/out")
  if [ "$i" = 1 ]; then
    pages=$(field pages "$t")
    "$(command -v nginx || echo /usr/sbin/nginx)" -p "$work/nginx" -c "$work/nginx/nginx.conf" &
    nginx=$!
    for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$((port + 1))/page-0000.xml" && break; sleep 0.1; done
  fi
  s=$(client static 127.0.0.1 $((port + 1)) "$pages")
  tb=$(field bytes_per_s "$t"); sb=$(field bytes_per_s "$s")
  ratio=$(python3 -c "print(round($tb / $sb, 3))")
  ours+=("$tb"); theirs+=("$sb"); ratios+=("$ratio"); grew+=($(( (peak - before) / 1024 ))); cached+=("$dcache")
  echo "run $i: tributary $t"
  echo "run $i: nginx     $s"
  echo "run $i: ratio $ratio, server RSS +$(( (peak - before) / 1024 )) MiB while serving (start $((before / 1024)) MiB), of which the store's block cache +$dcache MiB (now $(( $(cache) / 1048576 )) MiB)"
done
echo "median: tributary $(median "${ours[@]}") B/s, nginx $(median "${theirs[@]}") B/s, ratio $(median "${ratios[@]}"), RSS growth $(median "${grew[@]}") MiB (max $(printf '%s\n' "${grew[@]}" | sort -g | tail -1)), block cache growth per run: ${cached[*]} MiB"

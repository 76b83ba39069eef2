#!/usr/bin/env bash
# Many polite Sources at once: N static ResourceSync Sources of M resources each, every one its
# own origin (127.0.0.1, a port each), all served by one nginx that logs every request's time.
# One `tributary harvest` pass over all of them into a fresh store, at the default politeness
# (no `rate` or `concurrency` set: 5 requests a second per origin) with the largest
# `max_concurrent_sources` (256).
#
# Reports, against the polite floor, the pass's wall time: each source makes M + 4 requests
# (robots.txt, the Source Description, the Capability List, the Resource List, then its M
# resources), so it needs at least (M + 4) / rate seconds, and the sources go side by side in
# ceil(N / max_concurrent_sources) rounds. Also the peak RSS, and from nginx's log the busiest
# origin-second (most requests one origin received within one second of the clock) and the
# shortest gap between two requests to one origin (at 5/s, 200 ms).
#
# Usage: scripts/bench-many.sh [N] [M] [RUNS]    (1000, 20, 1)
#        env: BASE_PORT (20000: ports BASE_PORT .. BASE_PORT+N-1), TRIBUTARY (binary; default
#        target/release/tributary, built if missing), KEEP=1 (keep WORK: the site, the log, the store),
#        CAPTURE=1 (also capture the requests on the loopback with tcpdump, as root, and report
#        the shortest gap as the kernel stamped the packets: nginx's clock, which the log's
#        times come from, is read once per turn of its event loop and runs a few ms off with
#        1,000 servers)
# Needs: nginx, python3, /usr/bin/time; tcpdump for CAPTURE=1.
set -euo pipefail
export LC_NUMERIC=C

N=${1:-1000}
M=${2:-20}
RUNS=${3:-1}
BASE_PORT=${BASE_PORT:-20000}
RATE=5                 # the default `rate`, requests per second per origin
CONCURRENT_SOURCES=256 # the largest `max_concurrent_sources`
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${TRIBUTARY:-$TARGET/release/tributary}
WORK=$(mktemp -d /tmp/bench-many.XXXXXX)
# The sites on tmpfs when there is one (see bench-harvest.sh); the store on disk, in WORK.
if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs && -w /dev/shm ]]; then
    SCRATCH=$(mktemp -d /dev/shm/bench-many.XXXXXX)
else
    SCRATCH=$WORK
fi
chmod 755 "$SCRATCH"

cleanup() {
    if [[ -f $WORK/nginx.pid ]]; then kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true; fi
    if [[ ${KEEP:-0} != 1 ]]; then rm -rf "$WORK" "$SCRATCH"; else echo "kept $WORK and $SCRATCH"; fi
}
trap cleanup EXIT

command -v nginx >/dev/null || { echo "nginx missing: apt-get install -y nginx" >&2; exit 2; }
[[ -x $BIN ]] || (cd "$ROOT" && cargo build --release --bin tributary)

echo "== $N Sources of $M resources (1-4 KiB) in $SCRATCH/site, ports $BASE_PORT-$((BASE_PORT + N - 1))"
python3 - "$SCRATCH/site" "$N" "$M" "$BASE_PORT" <<'EOF'
import hashlib, os, random, sys
root, n, m, base_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(42)
ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/"'
def doc(tag, capability, up, locs):
    out = [f'<?xml version="1.0" encoding="UTF-8"?>\n<{tag} {ns}>']
    if up:
        out.append(f'<rs:ln rel="up" href="{up}"/>')
    out.append(f'<rs:md capability="{capability}" at="2026-01-01T00:00:00Z"/>')
    out.extend(locs)
    out.append(f'</{tag}>\n')
    return "\n".join(out)
for i in range(n):
    site, base = os.path.join(root, f"s{i:05d}"), f"http://127.0.0.1:{base_port + i}"
    os.makedirs(os.path.join(site, "files"))
    os.makedirs(os.path.join(site, ".well-known"))
    urls = []
    for j in range(m):
        data = rng.randbytes(rng.randint(1024, 4096))
        with open(os.path.join(site, "files", f"r{j:05d}.bin"), "wb") as f:
            f.write(data)
        sha = hashlib.sha256(data).hexdigest()
        urls.append(f'<url><loc>{base}/files/r{j:05d}.bin</loc>'
                    f'<rs:md hash="sha-256:{sha}" length="{len(data)}"/></url>')
    with open(os.path.join(site, "resourcelist.xml"), "w") as f:
        f.write(doc("urlset", "resourcelist", f"{base}/capabilitylist.xml", urls))
    with open(os.path.join(site, "capabilitylist.xml"), "w") as f:
        f.write(doc("urlset", "capabilitylist", f"{base}/.well-known/resourcesync",
                    [f'<url><loc>{base}/resourcelist.xml</loc><rs:md capability="resourcelist"/></url>']))
    with open(os.path.join(site, ".well-known", "resourcesync"), "w") as f:
        f.write(doc("urlset", "description", None,
                    [f'<url><loc>{base}/capabilitylist.xml</loc><rs:md capability="capabilitylist"/></url>']))
    with open(os.path.join(site, "robots.txt"), "w") as f:
        f.write("User-agent: *\nAllow: /\n")
EOF

echo "== starting nginx: $N servers, one log line per request"
mkdir -p "$WORK/nginx/logs"
{
    cat <<EOF
worker_processes 1;
worker_rlimit_nofile 16384;
pid $WORK/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 8192; }
http {
    # When each request began (the log line is written at its end), its origin, its status.
    log_format timed '\$msec \$request_time \$server_port \$status \$request_uri';
    access_log $WORK/access.log timed buffer=256k;
    sendfile on;
    keepalive_requests 100000;
    types { application/xml xml; }
    default_type application/octet-stream;
EOF
    for ((i = 0; i < N; i++)); do
        printf '    server { listen 127.0.0.1:%d; root %s/site/s%05d; location = /.well-known/resourcesync { default_type application/xml; } }\n' \
            $((BASE_PORT + i)) "$SCRATCH" "$i"
    done
    echo "}"
} >"$WORK/nginx.conf"
nginx -p "$WORK/nginx" -c "$WORK/nginx.conf"
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$((BASE_PORT + N - 1))/resourcelist.xml" -o /dev/null && break; sleep 0.1; done

{
    cat <<EOF
[aggregator]
base_url = "http://127.0.0.1:8080/"
listen = "127.0.0.1:8080"
data_dir = "store"
user_agent = "TributaryBench/0.1 (+mailto:ops@example.org)"
max_concurrent_sources = $CONCURRENT_SOURCES
EOF
    for ((i = 0; i < N; i++)); do
        printf '\n[[source]]\nid = "s%05d"\nurl = "http://127.0.0.1:%d/.well-known/resourcesync"\nallow_private = true\n' \
            "$i" $((BASE_PORT + i))
    done
} >"$WORK/sources.toml"

rounds=$(((N + CONCURRENT_SOURCES - 1) / CONCURRENT_SOURCES))
floor=$(awk -v r="$rounds" -v m="$M" -v rate="$RATE" 'BEGIN {printf "%.2f", r * (m + 4) / rate}')
# The first packet of each request ("GET " at the start of its TCP payload) to one of the ports.
capture_filter="tcp dst portrange $BASE_PORT-$((BASE_PORT + N - 1)) and tcp[((tcp[12:1] & 0xf0) >> 2):4] = 0x47455420"
for run in $(seq "$RUNS"); do
    rm -rf "$WORK/store"
    : >"$WORK/access.log"
    kill -USR1 "$(cat "$WORK/nginx.pid")" # reopen the log
    capture=""
    if [[ ${CAPTURE:-0} == 1 ]]; then
        tcpdump -i lo -n -s 128 -B 65536 --immediate-mode -w "$WORK/requests.pcap" "$capture_filter" 2>"$WORK/tcpdump.log" &
        capture=$!
        for _ in $(seq 50); do grep -q listening "$WORK/tcpdump.log" && break; sleep 0.1; done
    fi
    start=$EPOCHREALTIME
    /usr/bin/time -v -o "$WORK/time.txt" "$BIN" --config "$WORK/sources.toml" --data-dir "$WORK/store" harvest \
        >"$WORK/summary.txt" 2>"$WORK/log.txt" || { tail -20 "$WORK/summary.txt" "$WORK/log.txt" >&2; exit 1; }
    end=$EPOCHREALTIME
    kill -USR1 "$(cat "$WORK/nginx.pid")" # flush the log's buffer
    sleep 0.5
    kernel=""
    if [[ -n $capture ]]; then
        kill -INT "$capture"
        wait "$capture" || true
        kernel=$(tcpdump -r "$WORK/requests.pcap" -n -tt 2>/dev/null |
            awk '{ split($5, a, "."); sub(":", "", a[5]); print a[5], $1 }' | sort -k1,1 -k2,2g |
            awk 'BEGIN { gap = 1e9 } $1 == o && $2 - l < gap { gap = $2 - l } { o = $1; l = $2; n++ }
                END { printf "; by the packets (%d of the requests captured): %.4f s", n, gap }')
    fi
    wall=$(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.2f", e - s}')
    rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2/1024}' "$WORK/time.txt")
    cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {printf "%.1f", s}' "$WORK/time.txt")
    fetched=$(grep -o 'fetched [0-9]*' "$WORK/summary.txt" | awk '{s += $2} END {print s + 0}')
    # Per origin: requests in each second of the clock (by when each began), and the shortest
    # gap between two consecutive requests.
    # Only the pass's requests: the log's buffer may still hold the readiness check's.
    read -r requests busiest gap bad < <(awk -v t0="$start" '$1 - $2 >= t0 {printf "%s %.3f %s\n", $3, $1 - $2, $4}' "$WORK/access.log" |
        sort -k1,1 -k2,2g | awk '
        BEGIN { gap = 1e9 }
        { n++; sec[$1 " " int($2)]++; if ($3 >= 400 && $3 != 404) bad++ }
        $1 == origin && $2 - last < gap { gap = $2 - last }
        { origin = $1; last = $2 }
        END { for (k in sec) if (sec[k] > max) max = sec[k]; printf "%d %d %.3f %d\n", n, max, gap, bad }')
    echo "run $run: $fetched of $((N * M)) resources fetched, $requests requests ($bad failed), wall ${wall} s," \
        "floor ${floor} s ($rounds rounds of $(((M + 4))) requests at $RATE/s): $(awk -v w="$wall" -v f="$floor" 'BEGIN {printf "%.3f", w / f}')x the floor"
    echo "       peak RSS ${rss} MiB, CPU ${cpu} s; busiest origin-second: $busiest requests (rate $RATE/s);" \
        "shortest gap at one origin: ${gap} s by nginx's clock$kernel"
    [[ $fetched == $((N * M)) ]] || { echo "not every resource was fetched:" >&2; grep -v "fetched $M" "$WORK/summary.txt" | head >&2; }
done

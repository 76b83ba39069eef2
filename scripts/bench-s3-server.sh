#!/usr/bin/env bash
# What the S3 server of scripts/bench-s3.sh costs on its own: CPU-seconds SeaweedFS spends on
# the requests a Tributary harvest into a bucket makes, sent by a client that does nothing else
# (Python's http.client, 16 connections, no signing: the server runs without identities, so
# these are floors — the harvest's requests are signed and checked besides).
#
#   scripts/bench-s3-server.sh     env: N (2000), SIZE (141640, bench-s3.sh's average bitstream)
#
# Prints SeaweedFS's CPU-seconds and wall time for N of each: PUTs of SIZE random bytes, plain
# and conditional (`If-None-Match: *`, of new keys and of present ones), empty PUTs (a
# reference marker), HEADs of present and of absent keys.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=${N:-2000}
SIZE=${SIZE:-141640}
WORK=$(mktemp -d /tmp/bench-s3-server.XXXXXX)
WEED_PID=""
cleanup() {
    [[ -n $WEED_PID ]] && kill "$WEED_PID" 2>/dev/null && wait "$WEED_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
# shellcheck source=scripts/seaweedfs.sh
. "$ROOT/scripts/seaweedfs.sh"
start_seaweedfs "$WORK/weed" "$WORK/weed.log" - - 128 || exit 1
python3 - "${AWS_ENDPOINT##*:}" "$WEED_PID" "$N" "$SIZE" <<'PY'
import concurrent.futures as cf, http.client, os, sys, threading, time
port, pid, n, size = (int(a) for a in sys.argv[1:])
local = threading.local()

def cpu():
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

def request(method, path, body=None, headers={}):
    if not hasattr(local, "conn"):
        local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    local.conn.request(method, path, body=body, headers=headers)
    response = local.conn.getresponse()
    response.read()
    return response.status

def phase(name, call, want):
    c0, t0 = cpu(), time.time()
    with cf.ThreadPoolExecutor(16) as pool:
        statuses = set(pool.map(call, range(n)))
    assert statuses == {want}, f"{name}: statuses {statuses}"
    used = cpu() - c0
    print(f"{name:<22} SeaweedFS {used:5.2f} CPU-s ({1000 * used / n:.2f} ms each), {time.time() - t0:5.2f} s wall")

assert request("PUT", "/server-cost") == 200
body = os.urandom(size)
print(f"{n} requests of each kind, 16 connections:")
phase(f"PUT {size} B", lambda i: request("PUT", f"/server-cost/ab/{i:064x}", body), 200)
new = {"If-None-Match": "*"}
phase(f"PUT {size} B, If-None-Match", lambda i: request("PUT", f"/server-cost/cd/{i:064x}", body, new), 200)
phase("the same, present (412)", lambda i: request("PUT", f"/server-cost/cd/{i:064x}", body, new), 412)
phase("PUT empty (marker)", lambda i: request("PUT", f"/server-cost/refs/{i:064x}/a", b""), 200)
phase("HEAD, present", lambda i: request("HEAD", f"/server-cost/ab/{i:064x}"), 200)
phase("HEAD, absent", lambda i: request("HEAD", f"/server-cost/doomed/{i:064x}"), 404)
PY

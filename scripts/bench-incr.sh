#!/usr/bin/env bash
# Incremental and dump benchmarks against a local nginx on 127.0.0.1 (pattern: bench-harvest.sh).
#
# (a) Incremental: a 10,000-resource Source (1-4 KiB files, Resource List with md5 + sha-256,
#     a Change List written by `resync-build --write-changelist`, given a `datetime` per change
#     because resync-sync 2.0.1 --incremental refuses changes without one). Each run: fresh baseline of
#     both clients (not measured), then 100 changes on disk (80 updates, 10 creates, 10
#     deletes) and the new Change List; measured: `tributary harvest` (process wall
#     time, and the pass duration it prints) and `resync-sync --incremental --delete`.
# (b) Baseline from a Resource Dump vs from the Resource List: 10,000 x 2 KiB, one ZIP
#     package written with Python's zipfile (safe entry names); `tributary harvest` on a
#     fresh store with `dumps = true` and with `dumps = false` (process wall time).
# Prints every run, then medians and ratios.
#
# Usage: scripts/bench-incr.sh [RUNS]    env: N (10000), CHANGES (100), PORT (8098),
#        CONCURRENCY (64), TRIBUTARY (binary; default $CARGO_TARGET_DIR/release/tributary)
# Needs: nginx, python3 with resync (pip install resync), /usr/bin/time.
set -euo pipefail

RUNS=${1:-5}
N=${N:-10000}
CHANGES=${CHANGES:-100}
PORT=${PORT:-8098}
CONCURRENCY=${CONCURRENCY:-64}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${TRIBUTARY:-$TARGET/release/tributary}
WORK=$(mktemp -d /tmp/bench-incr.XXXXXX)
chmod 755 "$WORK"
BASE="http://127.0.0.1:$PORT"
SITE=$WORK/site

cleanup() {
    if [[ -f $WORK/nginx.pid ]]; then kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

command -v nginx >/dev/null || { echo "nginx missing: apt-get install -y nginx" >&2; exit 2; }
python3 -c 'import resync' || { echo "resync missing: pip install resync" >&2; exit 2; }
[[ -x $BIN ]] || (cd "$ROOT" && cargo build --release --bin tributary)
# resync-sync/resync-build write `.resync-client-status.cfg` into the working directory (and
# read ~/.resync*): run everything from the temp dir, with HOME there, so the repo stays clean.
mkdir -p "$WORK/home"
cd "$WORK"
[[ -d $HOME/.pyenv ]] && export PYENV_ROOT=${PYENV_ROOT:-$HOME/.pyenv} # pyenv shims find Python by HOME
export HOME="$WORK/home"

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
wall_of() { awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,t,":"); s=0; for(i=1;i<=n;i++) s=s*60+t[i]; print s}' "$1"; }

gen_files() { # DIR N MIN MAX SEED
    python3 - "$@" <<'EOF'
import os, random, sys
root, n, lo, hi, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(seed)
for i in range(n):
    d = os.path.join(root, f"{i // 1000:02d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"r{i:05d}.bin"), "wb") as f:
        f.write(rng.randbytes(rng.randint(lo, hi)))
EOF
}

write_config() { # FILE DUMPS
    cat >"$1" <<EOF
[aggregator]
base_url = "http://127.0.0.1:8080/"
listen = "127.0.0.1:8080"
data_dir = "store"
user_agent = "TributaryBench/0.1 (+mailto:ops@example.org)"

[defaults]
rate = "unlimited"
concurrency = $CONCURRENCY
dumps = $2

[[source]]
id = "bench"
url = "$BASE/capabilitylist.xml"
allow_private = true
EOF
}

echo "== generating $N files of 1-4 KiB (incremental) and $N x 2 KiB (dump) in $WORK"
gen_files "$WORK/pristine/files" "$N" 1024 4096 42
gen_files "$SITE/dumpsite/files" "$N" 2048 2048 7
(cd "$WORK/pristine" && resync-build --write-resourcelist --hash md5 --hash sha-256 \
    --outfile resourcelist.xml "$BASE/files/=files") 2>/dev/null
cat >"$SITE/capabilitylist.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
<rs:md capability="capabilitylist"/>
<url><loc>$BASE/resourcelist.xml</loc><rs:md capability="resourcelist"/></url>
<url><loc>$BASE/changelist.xml</loc><rs:md capability="changelist"/></url>
</urlset>
EOF
# The dump Source: Resource List, Resource Dump (one package) and a Capability List naming both.
# The package is written here rather than by `resync-build --write-resourcedump`: resync 2.0.1
# names the entries relative to the manifest's directory (`../00/r00000.bin`), which
# Tributary rightly refuses as unsafe (zip-slip), so (b) measured nothing.
(cd "$SITE/dumpsite" && mkdir -p out &&
    resync-build --write-resourcelist --hash md5 --hash sha-256 --outfile resourcelist.xml "$BASE/dumpsite/files/=files") >/dev/null 2>&1
python3 - "$SITE/dumpsite" "$BASE/dumpsite/files" <<'EOF2'
import hashlib, os, sys, zipfile
root, base = sys.argv[1], sys.argv[2]
files = sorted(os.path.relpath(os.path.join(d, f), os.path.join(root, "files"))
               for d, _, fs in os.walk(os.path.join(root, "files")) for f in fs)
entries = []
with zipfile.ZipFile(os.path.join(root, "out", "dump00000.zip"), "w", zipfile.ZIP_STORED) as z:
    for rel in files:
        data = open(os.path.join(root, "files", rel), "rb").read()
        path = "resources/" + rel  # safe: relative, no `..`
        z.writestr(path, data)
        entries.append(f'<url><loc>{base}/{rel}</loc><rs:md length="{len(data)}" '
                       f'hash="md5:{hashlib.md5(data).hexdigest()} sha-256:{hashlib.sha256(data).hexdigest()}" '
                       f'path="/{path}"/></url>')
    manifest = ('<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
                'xmlns:rs="http://www.openarchives.org/rs/terms/">\n<rs:md capability="resourcedump-manifest" '
                'at="2024-01-01T00:00:00Z"/>\n' + "\n".join(entries) + "\n</urlset>\n")
    z.writestr("manifest.xml", manifest)
EOF2
ls "$SITE/dumpsite/out/"dump*.zip >/dev/null
{
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">'
    echo "<rs:md capability=\"resourcedump\" at=\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"/>"
    for z in "$SITE/dumpsite/out/"dump*.zip; do
        echo "<url><loc>$BASE/dumpsite/out/$(basename "$z")</loc><rs:md length=\"$(stat -c %s "$z")\" type=\"application/zip\"/></url>"
    done
    echo '</urlset>'
} >"$SITE/dumpsite/resourcedump.xml"
for with in list dump; do
    {
        echo '<?xml version="1.0" encoding="UTF-8"?>'
        echo '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">'
        echo '<rs:md capability="capabilitylist"/>'
        echo "<url><loc>$BASE/dumpsite/resourcelist.xml</loc><rs:md capability=\"resourcelist\"/></url>"
        [[ $with == dump ]] && echo "<url><loc>$BASE/dumpsite/resourcedump.xml</loc><rs:md capability=\"resourcedump\"/></url>"
        echo '</urlset>'
    } >"$SITE/dumpsite/capabilitylist-$with.xml"
done

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
    types { application/xml xml; application/zip zip; }
    default_type application/octet-stream;
    server { listen 127.0.0.1:$PORT; root $SITE; }
}
EOF
nginx -p "$WORK/nginx" -c "$WORK/nginx.conf"
for _ in $(seq 50); do curl -sf "$BASE/capabilitylist.xml" -o /dev/null && break; sleep 0.1; done

# Resets the incremental Source to the pristine files and an empty Change List.
reset_source() {
    rm -rf "$SITE/files"
    cp -a "$WORK/pristine/files" "$SITE/files" # keep mtimes: resync-build compares lastmod
    cp "$WORK/pristine/resourcelist.xml" "$SITE/resourcelist.xml"
    (cd "$SITE" && resync-build --write-changelist --empty --outfile changelist.xml) >/dev/null 2>&1
}

# CHANGES changes on disk (80% updates, 10% creates, 10% deletes), then the Change List.
change_source() {
    python3 - "$SITE/files" "$CHANGES" "$1" <<'EOF'
import os, random, sys
root, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs)
picked = rng.sample(files, n)
creates, deletes = n // 10, n // 10
for i, p in enumerate(picked):
    if i < deletes:
        os.remove(p)
    elif i < deletes + creates:
        with open(os.path.join(root, "00", f"new{i:03d}.bin"), "wb") as f:
            f.write(rng.randbytes(rng.randint(1024, 4096)))
    else:
        with open(p, "wb") as f:
            f.write(rng.randbytes(rng.randint(1024, 4096)))
EOF
    (cd "$SITE" && resync-build --write-changelist --reference resourcelist.xml --hash md5 --hash sha-256 \
        --outfile changelist.xml "$BASE/files/=files") >/dev/null 2>&1
    # resync-build writes no `datetime`, and resync-sync --incremental refuses changes without
    # one ("has no update datetime/timestamp"): give every change the time the list was made.
    python3 - "$SITE/changelist.xml" <<'EOF'
import datetime, re, sys
p = sys.argv[1]
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
s = open(p).read()
open(p, "w").write(re.sub(r"<rs:md change=", f'<rs:md datetime="{now}" change=', s))
EOF
}

write_config "$WORK/incr.toml" false
: >"$WORK/trib.wall"; : >"$WORK/trib.pass"; : >"$WORK/py.wall"
for run in $(seq "$RUNS"); do
    reset_source
    rm -rf "$WORK/store" "$WORK/dst" "$HOME/.resync-client-status.cfg" "$WORK/.resync-client-status.cfg"; mkdir -p "$WORK/dst"
    "$BIN" --config "$WORK/incr.toml" --data-dir "$WORK/store" harvest >/dev/null 2>"$WORK/log.txt" ||
        { cat "$WORK/log.txt" >&2; exit 1; }
    resync-sync --baseline --hash md5 --noauth --sitemap "$BASE/resourcelist.xml" "$BASE/files/=$WORK/dst" >/dev/null 2>&1
    sleep 1 # lastmod of the changed files must be after the baseline for resync's --incremental filter
    change_source "$run"
    /usr/bin/time -v -o "$WORK/time.txt" "$BIN" --config "$WORK/incr.toml" --data-dir "$WORK/store" \
        harvest >"$WORK/summary.txt" 2>"$WORK/log.txt" || { cat "$WORK/summary.txt" "$WORK/log.txt" >&2; exit 1; }
    wall=$(wall_of "$WORK/time.txt")
    pass=$(grep -oE 'in [0-9.]+(ms|s|µs)' "$WORK/summary.txt" | head -1 | awk '{v=$2; if (v ~ /ms$/) {sub(/ms/,"",v); v=v/1000} else if (v ~ /µs$/) {sub(/µs/,"",v); v=v/1e6} else sub(/s/,"",v); print v}')
    echo "tributary run $run: $(head -1 "$WORK/summary.txt"); process wall ${wall}s, pass ${pass:-?}s"
    echo "$wall" >>"$WORK/trib.wall"; echo "${pass:-$wall}" >>"$WORK/trib.pass"
    start=$(date +%s.%N)
    # No --hash: resync 2.0.1's --incremental crashes with it ('ChangeList' object has no
    # attribute 'hashes'); it then trusts the Change List and verifies nothing.
    resync-sync --incremental --delete --noauth --sitemap "$BASE/resourcelist.xml" \
        --changelist-uri "$BASE/changelist.xml" "$BASE/files/=$WORK/dst" >"$WORK/py.txt" 2>&1 ||
        { echo "resync-sync --incremental failed:" >&2; tail -5 "$WORK/py.txt" >&2; exit 1; }
    end=$(date +%s.%N)
    py=$(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.3f", e - s}')
    echo "resync-sync --incremental run $run: ${py}s, $(find "$WORK/dst" -type f | wc -l) files in its copy"
    echo "$py" >>"$WORK/py.wall"
done

write_config "$WORK/dump.toml" true
write_config "$WORK/list.toml" false
: >"$WORK/dump.wall"; : >"$WORK/list.wall"
for run in $(seq "$RUNS"); do
    for with in list dump; do
        sed -i "s#^url = .*#url = \"$BASE/dumpsite/capabilitylist-$with.xml\"#" "$WORK/$with.toml"
        rm -rf "$WORK/store"
        /usr/bin/time -v -o "$WORK/time.txt" "$BIN" --config "$WORK/$with.toml" --data-dir "$WORK/store" \
            harvest >"$WORK/summary.txt" 2>"$WORK/log.txt" || { cat "$WORK/summary.txt" "$WORK/log.txt" >&2; exit 1; }
        wall=$(wall_of "$WORK/time.txt")
        grep -q "fetched $N" "$WORK/summary.txt" || { echo "$with run $run did not store $N" >&2; cat "$WORK/summary.txt" "$WORK/log.txt" >&2; exit 1; }
        if [[ $with == dump ]] && ! grep -q "baselined from the Resource Dump" "$WORK/log.txt"; then
            echo "dump run $run did not use the dump" >&2; cat "$WORK/log.txt" >&2; exit 1
        fi
        echo "baseline from the $with, run $run: ${wall}s"
        echo "$wall" >>"$WORK/$with.wall"
    done
done

tw=$(median <"$WORK/trib.wall"); tp=$(median <"$WORK/trib.pass"); pw=$(median <"$WORK/py.wall")
dw=$(median <"$WORK/dump.wall"); lw=$(median <"$WORK/list.wall")
echo
echo "medians over $RUNS runs:"
echo "  (a) $CHANGES changes of $N: tributary pass ${tp}s (target < 0.1 s), process ${tw}s; resync-sync --incremental ${pw}s"
echo "      ratio resync / tributary (process): $(awk -v a="$pw" -v b="$tw" 'BEGIN {printf "%.1f", a / b}')x"
echo "  (b) baseline of $N x 2 KiB: from the Resource Dump ${dw}s, from the Resource List ${lw}s," \
    "list / dump $(awk -v a="$lw" -v b="$dw" 'BEGIN {printf "%.2f", a / b}')x"

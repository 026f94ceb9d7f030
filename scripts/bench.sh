#!/usr/bin/env bash
# Benchmarks (numbers, not pass/fail): the embedded demo end to end, and store writes per like on
# a long tail and on a viral post. Prints one line per run; BENCHMARKS.md records a run.
# Usage: scripts/bench.sh [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
cargo build --release --bin tally >&2
bin=target/release/tally
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(' '.join(str(d[k]) for k in sys.argv[1:]))" "$@"; }
echo "# demo --events 1000000 (4 shards, 1000 posts, Zipf 1.1): elapsed_secs events_per_sec writes_per_event exact"
for i in $(seq 1 "$runs"); do
  "$bin" demo --events 1000000 --json | field elapsed_secs events_per_sec writes_per_event exact
done
echo "# writes per like by traffic shape (200000 events): posts zipf -> writes_per_event windows exact"
for shape in "100000 0.9" "100000 1.1" "100000 1.3" "10 2.0"; do
  set -- $shape
  echo -n "$1 $2 -> "
  "$bin" demo --events 200000 --posts "$1" --zipf "$2" --json | field writes_per_event windows exact
done

#!/usr/bin/env bash
# Benchmarks (numbers, not pass/fail): the embedded demo end to end, and write units per like on a
# long tail and on a viral post beside the two patterns tally replaces. Prints one line per run; BENCHMARKS.md records a run.
# Usage: scripts/bench.sh [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
cargo build --release --bin tally >&2
bin=target/release/tally
echo "# demo --events 1000000 (4 shards, 1000 posts, Zipf 1.1) beside its floor (bare SQLite inserts of the same records)"
cargo bench --bench demo -- "$runs"
echo "# side by side, one run each (embedded): posts zipf shards events -> tally, update per like, transaction per like"
echo "#   each: write units per event, items per event, records/s, exact"
for shape in "100000 1.1 2 40000" "100000 1.1 4 100000" "1000 1.1 4 100000" "10 2.0 4 100000" "1 1.0 4 100000"; do
  set -- $shape
  echo -n "$1 $2 $3 $4 -> "
  "$bin" demo --events "$4" --posts "$1" --zipf "$2" --shards "$3" --baselines --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
b = d['baselines']
row = lambda u, i, r, e: '%.3f %.3f %.0f %s' % (u, i, r, e)
print(' | '.join([
    row(d['dynamodb_wcu_per_event'], d['writes_per_event'], d['events_per_sec'], d['exact']),
    *(row(b[k]['write_units_per_event'], b[k]['items_per_event'], b[k]['events_per_sec'], b[k]['exact'])
      for k in ('update_per_like', 'transaction_per_like'))]))"
done
echo "# counting likers beside counting events, the same stream (embedded, 2 % retries): posts zipf shards events"
echo "#   each mode: write units per event (edges), read units per event, events/s, exact"
for shape in "100000 1.1 4 40000" "10 2.0 4 40000" "1000 1.1 4 200000"; do
  set -- $shape
  echo -n "$1 $2 $3 $4 -> "
  for mode in likers events; do
    TALLY_COUNTER__COUNT=$mode "$bin" demo --events "$4" --posts "$1" --zipf "$2" --shards "$3" --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
e = d['events']
print('$mode %.3f (%.3f) %.3f %.0f %s' % (d['dynamodb_wcu_per_event'], d['write_units']['edges'] / e,
      d['items_read'] / e, d['events_per_sec'], d['exact']), end='  ')"
  done
  echo
done

"""Aggregates NDJSON lines (stdin) into KPL records with AWS's own aggregator (PyPI
aws-kinesis-agg), as a producer using the Kinesis Producer Library would: each output line is
`partition_key<TAB>base64(aggregated record)`. Argument: user records per aggregate."""
import base64
import json
import sys

from aws_kinesis_agg.aggregator import RecordAggregator

per_record = int(sys.argv[1])
# One aggregator per partition key: the KPL only aggregates user records bound for the same shard,
# so a retry of an event always reaches the shard of its original.
aggs = {}


def emit(rec):
    pk, _ehk, data = rec.get_contents()
    print(f"{pk}\t{base64.b64encode(data).decode()}")


for i, line in enumerate(sys.stdin):
    line = line.rstrip("\n")
    if not line:
        continue
    try:
        key = json.loads(line).get("post_id") or f"line-{i}"
        key = key if isinstance(key, str) else f"line-{i}"
    except (ValueError, AttributeError):
        key = f"line-{i}"
    agg = aggs.setdefault(key, RecordAggregator())
    full = agg.add_user_record(key, line.encode())
    if full is not None:
        emit(full)
    if agg.get_num_user_records() >= per_record:
        emit(agg.clear_and_get())
for agg in aggs.values():
    if agg.get_num_user_records() > 0:
        emit(agg.clear_and_get())

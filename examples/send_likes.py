#!/usr/bin/env python3
"""Send like events to tally's Kinesis stream from your own producer (boto3).

Reads one action per line (JSON: event_id, post_id, user_id, action, created_at) and puts them
with PutRecords: batches of at most 500 records and 5 MiB, and after each call only the entries
that failed (ErrorCode set: throttled or an internal error) are sent again, with capped,
jittered backoff. Each record keeps its own event_id when it is sent again, so a retry changes
nothing in tally's counts.

    python3 send_likes.py --stream tally-likes actions.ndjson
    python3 send_likes.py --stream s --endpoint-url http://127.0.0.1:4568 actions.ndjson

The partition key is the post id, so one user's actions on a post stay in order on one shard.
A post too hot for one shard (--hot POST) is spread over --hot-keys keys by user, never by event.
"""
import argparse
import hashlib
import json
import random
import sys
import time

import boto3

MAX_RECORDS = 500
MAX_BYTES = 5 * 1024 * 1024


def partition_key(action, hot, hot_keys):
    post = action["post_id"]
    if post in hot and hot_keys > 1:
        # By user: a user's like and their unlike of the post land on the same shard, in order.
        k = int(hashlib.md5(action["user_id"].encode()).hexdigest(), 16) % hot_keys
        return f"{post}#{k}"
    return post


def batches(entries):
    batch, size = [], 0
    for e in entries:
        n = len(e["Data"]) + len(e["PartitionKey"].encode())
        if batch and (len(batch) == MAX_RECORDS or size + n > MAX_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(e)
        size += n
    if batch:
        yield batch


def put_all(client, stream, batch, attempts=10):
    """Puts one batch; sends again only the entries that failed, until none is left."""
    for attempt in range(attempts):
        out = client.put_records(StreamName=stream, Records=batch)
        if out["FailedRecordCount"] == 0:
            return
        batch = [e for e, r in zip(batch, out["Records"]) if "ErrorCode" in r]
        time.sleep(random.uniform(0, min(2.0, 0.05 * 2**attempt)))
    raise RuntimeError(f"{len(batch)} records still failing after {attempts} attempts")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stream", required=True)
    p.add_argument("--endpoint-url")
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--hot", action="append", default=[], help="a post to spread over keys")
    p.add_argument("--hot-keys", type=int, default=8)
    p.add_argument("file", help="NDJSON of actions, - for stdin")
    a = p.parse_args()
    client = boto3.client("kinesis", endpoint_url=a.endpoint_url, region_name=a.region)
    lines = sys.stdin if a.file == "-" else open(a.file, encoding="utf-8")
    entries = []
    for line in lines:
        if not line.strip():
            continue
        action = json.loads(line)
        entries.append(
            {
                "Data": json.dumps(action, separators=(",", ":")).encode(),
                "PartitionKey": partition_key(action, set(a.hot), a.hot_keys),
            }
        )
    sent = 0
    for b in batches(entries):
        put_all(client, a.stream, b)
        sent += len(b)
    print(f"sent {sent} records to {a.stream}")


if __name__ == "__main__":
    main()

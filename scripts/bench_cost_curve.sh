#!/usr/bin/env bash
# Issue 42, target 3: the cost curve of one server process as connections grow.
#
#   RUNS=3 OUT=/tmp/curve scripts/bench_cost_curve.sh
#   python scripts/plot_bench.py --curve /tmp/curve docs     # docs/bench-cost-curve.png
#
# Per run, every server fresh (`tsync serve --store $STORE`, default memory,
# pinned to SERVER_CPUS, default 0; the generator to CLIENT_CPUS, default 1):
#
# - `idle` at each of SIZES (default 2,000, 5,000, 10,000 and 15,000 WebSocket
#   connections): server RSS per connection, connected and subscribed (every
#   connection subscribed to the same transcript), the wall time to connect
#   them all and to subscribe them all (every subscribe sent at once, until
#   the last baseline is read), the server's CPU per subscribe and the
#   generator's CPU meanwhile;
# - `curve1000x50` and `curve10000x5`: p99 append -> delivery at 1,000
#   subscribers x 50 appends/s and at 10,000 x 5/s (both 50,000 deliveries/s,
#   200 B, DURATION s, default 10) with the ceiling generator and its latency
#   sample (`tsync bench fanout --ceiling`): the second p99 over the first,
#   within each run, is the target's ratio.
#
# The generator spreads its sockets over processes: ceil(N / PER_PROC)
# subscriber processes (PER_PROC default 5,000, at least 2), so that none
# holds more than PER_PROC descriptors, far below the 20,000 a process may
# open here; the server holds all N (it raises its own soft limit to the
# hard one, 20,000 on this machine, and fits max_connections below it).
# Each run holds /work/wt/bench.lock (LOCK) while it runs, so that other
# benchmarks on the shared machine do not overlap it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
py="${PYTHON:-$root/.venv/bin/python}"
OUT="${OUT:-/tmp/bench-curve}"
RUNS="${RUNS:-3}"
STORE="${STORE:-memory}"
SIZES="${SIZES:-2000 5000 10000 15000}"
PER_PROC="${PER_PROC:-5000}"
DURATION="${DURATION:-10}"
SERVER_CPUS="${SERVER_CPUS:-0}"
CLIENT_CPUS="${CLIENT_CPUS:-1}"
PORT="${BENCH_PORT:-8841}"
LOCK="${LOCK:-/work/wt/bench.lock}"
ONLY="${ONLY:-idle latency}"
mkdir -p "$OUT"

server_pid=""
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}
trap stop_server EXIT

start_server() {
  local url="$STORE"
  if [ "$STORE" = sqlite ]; then
    rm -rf /tmp/tsync-curve-db
    url="sqlite:/tmp/tsync-curve-db"
  fi
  # exec: `$!` is the server itself, pinned from its first instruction.
  (exec taskset -c "$SERVER_CPUS" "$py" -m server.run.cli serve --port "$PORT" --store "$url" \
    --log-level warning >>"$OUT/server.log" 2>&1) &
  server_pid=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && return 0
    sleep 0.1
  done
  echo "server on port $PORT did not come up" >&2
  return 1
}

procs_for() {  # subscriber processes for $1 connections
  local p=$((($1 + PER_PROC - 1) / PER_PROC))
  [ "$p" -lt 2 ] && p=2
  echo "$p"
}

bench() {  # $1 = name, $2 = run, $3 = connections, then `tsync bench` arguments
  local name="$1" run="$2" n="$3"
  shift 3
  local out="$OUT/$name-$STORE-$run.json"
  echo "== $name ($STORE) run $run: tsync bench $* --procs $(procs_for "$n")" >&2
  start_server
  "$py" -m server.run.cli bench "$@" --url "ws://127.0.0.1:$PORT/v1/ws" \
    --server-pid "$server_pid" --server-cpus "$SERVER_CPUS" --client-cpus "$CLIENT_CPUS" \
    --procs "$(procs_for "$n")" --fast --no-progress --label "tsync ($STORE)" --json "$out" \
    >"$OUT/$name-$STORE-$run.md" || echo "   (run reported failures: see $out)" >&2
  stop_server
}

one_run() {
  local run="$1"
  if [[ " $ONLY " == *" idle "* ]]; then
    for n in $SIZES; do
      bench "idle$n" "$run" "$n" idle --subscribers "$n" --drain-timeout 240
    done
  fi
  if [[ " $ONLY " == *" latency "* ]]; then
    bench curve1000x50 "$run" 1000 fanout --ceiling --subscribers 1000 --rate 50 \
      --duration "$DURATION" --size 200 --drain-timeout 120
    bench curve10000x5 "$run" 10000 fanout --ceiling --subscribers 10000 --rate 5 \
      --duration "$DURATION" --size 200 --drain-timeout 120
  fi
}

if [ "${1:-}" = __one ]; then  # one run, under the lock (below)
  one_run "$2"
  exit 0
fi
for run in $(seq "$RUNS"); do
  if [ -n "$LOCK" ]; then
    # The lock is held for one run at a time (a few minutes), not for all.
    flock "$LOCK" "$0" __one "$run"
  else
    one_run "$run"
  fi
done

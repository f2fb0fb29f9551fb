#!/usr/bin/env bash
# The exact commands behind docs/benchmarks.md. Every run starts a fresh
# `tsync serve` (log level warning) and a fresh broadcast baseline, and runs
# `tsync bench ... --compare` so that both are measured in the same run.
#
#   scripts/run_benchmarks.sh                 # everything, 3 runs each
#   RUNS=1 STORES=sqlite ONLY=fanout500 scripts/run_benchmarks.sh
#
# Results: one JSON per run in $OUT (default /tmp/bench-results); then
#   python scripts/bench_summary.py $OUT      # medians and ranges as Markdown
#   python scripts/plot_bench.py $OUT docs    # docs/bench-*.png
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
py="${PYTHON:-$root/.venv/bin/python}"
OUT="${OUT:-/tmp/bench-results}"
RUNS="${RUNS:-3}"
STORES="${STORES:-sqlite redis}"
ONLY="${ONLY:-}"
PROCS="${PROCS:-2}"
PORT=8801
BASE_PORT=8802
REDIS_PORT=6391
mkdir -p "$OUT"

server_pid=""
baseline_pid=""
redis_pid=""

stop_servers() {
  for pid in $server_pid $baseline_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  server_pid=""
  baseline_pid=""
}

wait_healthy() {
  for _ in $(seq 100); do
    if "$py" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$1/healthz', timeout=1)" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "server on port $1 did not come up" >&2
  return 1
}

start_servers() {  # $1 = store name, $2... = extra `tsync serve` arguments
  local store="$1"
  shift
  local url
  case "$store" in
    sqlite) rm -rf /tmp/tsync-bench-db; url="sqlite:/tmp/tsync-bench-db" ;;
    redis) redis-cli -p "$REDIS_PORT" flushall >/dev/null; url="redis://127.0.0.1:$REDIS_PORT/0" ;;
  esac
  "$py" -m server.cli serve --port "$PORT" --store "$url" --log-level warning "$@" \
    >>"$OUT/server.log" 2>&1 &
  server_pid=$!
  "$py" scripts/broadcast_baseline.py --port "$BASE_PORT" >>"$OUT/baseline.log" 2>&1 &
  baseline_pid=$!
  wait_healthy "$PORT"
  wait_healthy "$BASE_PORT"
}

bench() {  # $1 = name, $2 = store, $3 = run, then `tsync bench` arguments
  local name="$1" store="$2" run="$3"
  shift 3
  local out="$OUT/$name-$store-$run.json"
  echo "== $name ($store) run $run: tsync bench $*" >&2
  "$py" -m server.cli bench "$@" --url "ws://127.0.0.1:$PORT/v1/ws" \
    --compare "ws://127.0.0.1:$BASE_PORT/v1/ws" \
    --server-pid "$server_pid" --compare-pid "$baseline_pid" \
    --procs "$PROCS" --label "tsync ($store)" --no-progress --json "$out" >"$OUT/$name-$store-$run.md" \
    || echo "   (run reported failures: see $out)" >&2
}

wanted() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }

trap 'stop_servers; [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null; true' EXIT

if [[ " $STORES " == *" redis "* ]]; then
  redis-server --port "$REDIS_PORT" --save '' --appendonly no --bind 127.0.0.1 >"$OUT/redis.log" 2>&1 &
  redis_pid=$!
  sleep 0.5
fi

for store in $STORES; do
  for run in $(seq "$RUNS"); do
    if wanted fanout500; then
      start_servers "$store"
      bench fanout500 "$store" "$run" fanout --subscribers 500 --count 2000 --rate 1000 --size 200 --drain-timeout 240
      stop_servers
    fi
    for rate in 50 100; do
      if wanted "fanout1000x$rate"; then
        start_servers "$store"
        bench "fanout1000x$rate" "$store" "$run" fanout --subscribers 1000 --rate "$rate" --duration 6 --size 200 --drain-timeout 120
        stop_servers
      fi
    done
    if wanted chatroom; then
      start_servers "$store"
      bench chatroom "$store" "$run" chatroom --subscribers 200 --transcripts 50 --writers 50 --rate 5 --duration 8
      stop_servers
    fi
    if wanted slow; then
      # A 256 KiB outbound queue and 8 KB messages so that the stopped share
      # (10 of 50) overflows the kernel's socket buffers and its queue, and
      # gets lagged, within the run; share 0 is the control run.
      for share in 0 0.2; do
        start_servers "$store" --set queue_max_bytes=262144
        bench "slow$share" "$store" "$run" slow --subscribers 50 --slow-share "$share" --rate 100 --duration 10 --size 8000
        stop_servers
      done
    fi
    if wanted catchup; then
      start_servers "$store"
      bench catchup "$store" "$run" catchup --subscribers 100 --behind 100 --baseline-messages 10000
      stop_servers
    fi
    if wanted idle; then
      start_servers "$store"
      bench idle "$store" "$run" idle --subscribers 2000
      stop_servers
    fi
  done
done

# Throughput against the number of subscribers (one run each, embedded store).
if wanted sweep; then
  for n in 100 250 500 1000; do
    start_servers sqlite
    bench "sweep$n" sqlite 1 fanout --subscribers "$n" --count 500 --rate 1000 --size 200
    stop_servers
  done
fi

#!/usr/bin/env bash
# The exact commands behind docs/benchmarks.md. Every run starts a fresh
# `tsync serve` (log level warning) and a fresh broadcast baseline, and runs
# `tsync bench ... --compare` so that both are measured in the same run.
#
#   scripts/run_benchmarks.sh                 # everything, 3 runs each
#   RUNS=1 STORES=sqlite ONLY=fanout500 scripts/run_benchmarks.sh
#   scripts/run_benchmarks.sh issue15         # the table of issue 15 (below)
#   scripts/run_benchmarks.sh drafts          # the table of issue 17 (below)
#   scripts/run_benchmarks.sh ds              # Durable Streams vs the Node reference (below)
#   scripts/run_benchmarks.sh ceiling         # the server's ceiling, --workers scaling (below)
#   scripts/run_benchmarks.sh aichat          # one reply via /v1/ai/chat beside /v1/ws (below)
#
# `issue15` measures the server, not the generator: the server and the
# baseline are pinned to SERVER_CPUS (default 0), the generator and its
# subscriber processes to CLIENT_CPUS (default 1), the subscribers check
# envelopes only on uvloop (`tsync bench --fast`; CHECK=full for the full
# checks), and every result reports the generator's own CPU share. Its rows:
# the burst (500 x 2,000), 1,000 subscribers at 50 and 100 appends/s, the
# chatroom and idle memory per connection, for sqlite and memory (STORES);
# `workers` (the burst on Redis with --workers 1 and 2; both runs give the
# server WORKERS_CPUS, default every CPU, and leave the generator unpinned:
# on 2 cores they share); `replicas` (1,000 x 50/s with the subscribers on
# replica B and the writer on replica A, over one Redis and over a
# three-master Redis Cluster: the cross-replica p99 of each).
#
# `drafts` (issue 17) pins like `issue15` and runs `tsync bench stream`: 500
# subscribers, one writer streaming drafts of 50 tokens at 50 tokens/s for
# 10 s (stream500), and the same with one subscriber that stops reading for
# 5 s (stream500pause); the baseline sends each token to every subscriber as
# its own frame. Its rows: delivered tokens/s, token latency p50/p99 beside
# the commits' p99, server CPU per delivered token, and the paused reader's
# backlog frames (one text frame per draft is the target).
#
# `ds` (issue 27) pins like `issue15` and runs `tsync bench streams`: 1,000
# readers of one Durable Stream x 1 writer appending 50 JSON values/s for
# 10 s, the readers in SSE (ds1000sse) and in long-poll (ds1000lp) mode,
# against `tsync serve` (STORES, default "memory sqlite"; started with
# --set max_http_connections=3000: 1,000 readers and the writer pass the
# default 1,000) and, in the same run (--compare), the protocol's Node
# reference server (@durable-streams/server 0.3.7, in memory,
# scripts/ds_reference: `npm ci` there first). Its rows: p50/p99 append ->
# delivery, server CPU per delivered value, values per long-poll answer.
#
# `ceiling` (issue 30) measures the server where it is the bottleneck:
# `tsync bench --ceiling` (precomputed appends, subscribers that count frames
# and check the last seq and revision only), pinned like `issue15`. Its rows:
# the burst's shape (ceil500: 500 subs x 2,000 appends at 1,000/s) and
# 1,000 subs x 100/s (ceil1000x100) and x 400/s (ceil1000x400, past the
# ceiling), each reporting delivered/s, server and generator CPU and `bound`
# (server-bound, generator-bound, server-cpus-full, offered-load, contended);
# lat1000x50: 1,000 subs x 50/s for 6 s (issue 30 item 1's load), whose p99
# append -> delivery latency is measured by the ceiling's generator, far from
# saturating its core: each precomputed append is stamped with its wall-clock
# send time as it is written, and about 64 subscribers (--latency-sample)
# time every delivery; ratio p99 (tsync) / p99 (baseline) is item 1's figure;
# `ceilworkers`: 500 subscribers x WORKERS_RATE appends/s (default 1,000) for
# 2 s on Redis with --workers 1 and 2, the server free on every CPU and the
# generator capped by a cgroup CPU quota of CLIENT_QUOTA CPUs (default 0.6)
# on any CPU, so that the workers have the rest (needs a writable
# /sys/fs/cgroup/cpu, v1, or cgroup v2's cpu.max).
#
# `aichat` (issue 40) pins like `issue15` and runs `tsync bench aichat`
# (aichat1000): one reply written at 50 chunks/s for 10 s, read by 1,000
# readers through /v1/ai/chat (the AI SDK's WebSocketChatTransport protocol,
# each reader resumes the chat) and, in the same run, by 1,000 /v1/ws
# subscribers as plain draft frames (the baseline), against `tsync serve`
# alone (STORES, default memory). Its rows: server CPU per delivered chunk
# and p99 chunk -> delivery, ai chat / draft frames.
#
# Results: one JSON per run in $OUT (default /tmp/bench-results); then
#   python scripts/bench_summary.py $OUT      # medians and ranges as Markdown
#   python scripts/plot_bench.py $OUT docs    # docs/bench-*.png
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
py="${PYTHON:-$root/.venv/bin/python}"
MODE="${1:-all}"
OUT="${OUT:-/tmp/bench-results}"
RUNS="${RUNS:-3}"
PROCS="${PROCS:-2}"
if [ "$MODE" = issue15 ]; then
  STORES="${STORES:-sqlite memory}"
  ONLY="${ONLY:-fanout500 fanout1000x50 fanout1000x100 chatroom idle workers replicas}"
  SERVER_CPUS="${SERVER_CPUS-0}"
  CLIENT_CPUS="${CLIENT_CPUS-1}"
  CHECK="${CHECK:-fast}"
elif [ "$MODE" = drafts ]; then
  STORES="${STORES:-sqlite}"
  ONLY="${ONLY:-stream500 stream500pause}"
  SERVER_CPUS="${SERVER_CPUS-0}"
  CLIENT_CPUS="${CLIENT_CPUS-1}"
  CHECK="${CHECK:-fast}"
elif [ "$MODE" = ds ]; then
  STORES="${STORES:-memory sqlite}"
  ONLY="${ONLY:-ds1000sse ds1000lp}"
  SERVER_CPUS="${SERVER_CPUS-0}"
  CLIENT_CPUS="${CLIENT_CPUS-1}"
  CHECK="${CHECK:-fast}"
elif [ "$MODE" = ceiling ]; then
  STORES="${STORES:-memory sqlite}"
  ONLY="${ONLY:-ceil500 ceil1000x100 ceil1000x400 lat1000x50 ceilworkers}"
  SERVER_CPUS="${SERVER_CPUS-0}"
  CLIENT_CPUS="${CLIENT_CPUS-1}"
  CHECK="${CHECK:-fast}"
elif [ "$MODE" = aichat ]; then
  STORES="${STORES:-memory}"
  ONLY="${ONLY:-aichat1000}"
  SERVER_CPUS="${SERVER_CPUS-0}"
  CLIENT_CPUS="${CLIENT_CPUS-1}"
  CHECK="${CHECK:-fast}"
elif [ "$MODE" = all ]; then
  STORES="${STORES:-sqlite redis}"
  ONLY="${ONLY:-}"
  SERVER_CPUS="${SERVER_CPUS-}"
  CLIENT_CPUS="${CLIENT_CPUS-}"
  CHECK="${CHECK:-full}"
else
  echo "usage: $0 [all|issue15|drafts|ds|ceiling|aichat]" >&2
  exit 2
fi
WORKERS_CPUS="${WORKERS_CPUS-0-$(($(nproc) - 1))}"
PORT="${BENCH_PORT:-8801}"  # BENCH_PORT, BENCH_BASE_PORT: to stay clear of other runs
BASE_PORT="${BENCH_BASE_PORT:-8802}"
REPLICA_PORT=8803
REDIS_PORT=6391
CLUSTER_PORTS="7101 7102 7103"
mkdir -p "$OUT"

# What every `tsync bench` gets: the check mode and the generator's CPUs.
common=(--procs "$PROCS" --no-progress)
[ "$CHECK" = fast ] && common+=(--fast)
client_cpus="$CLIENT_CPUS"  # the generator's CPUs ("" leaves it unpinned)
# A server started on SERVER_CPUS from its first instruction on (bench
# --server-cpus pins it again, every thread and child, before it measures).
pinned() {  # $1 = CPUs ("" for none), then the command; only ever run with `&`
  # It execs, so that the `$!` of `pinned ... &` is the server itself: a
  # subshell in between would take the kill and leave the server running.
  local cpus="$1"
  shift
  if [ -n "$cpus" ]; then exec taskset -c "$cpus" "$@"; else exec "$@"; fi
}

server_pid=""
baseline_pid=""
replica_pid=""
redis_pid=""
cluster_pids=""
server_cpus="$SERVER_CPUS"  # the CPUs of the servers started next

stop_servers() {
  for pid in $server_pid $baseline_pid $replica_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  server_pid=""
  baseline_pid=""
  replica_pid=""
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

store_url() {  # $1 = store name
  case "$1" in
    sqlite) rm -rf /tmp/tsync-bench-db; echo "sqlite:/tmp/tsync-bench-db" ;;
    memory) echo "memory" ;;
    redis) redis-cli -p "$REDIS_PORT" flushall >/dev/null; echo "redis://127.0.0.1:$REDIS_PORT/0" ;;
    cluster)
      for p in $CLUSTER_PORTS; do redis-cli -p "$p" flushall >/dev/null; done
      echo "redis+cluster://$(echo "$CLUSTER_PORTS" | sed 's/\([0-9][0-9]*\)/127.0.0.1:\1/g; s/ /,/g')"
      ;;
  esac
}

start_servers() {  # $1 = store name, $2... = extra `tsync serve` arguments
  local store="$1"
  shift
  local url
  url="$(store_url "$store")"
  pinned "$server_cpus" "$py" -m server.run.cli serve --port "$PORT" --store "$url" \
    --log-level warning "$@" >>"$OUT/server.log" 2>&1 &
  server_pid=$!
  pinned "$server_cpus" "$py" scripts/broadcast_baseline.py --port "$BASE_PORT" \
    >>"$OUT/baseline.log" 2>&1 &
  baseline_pid=$!
  wait_healthy "$PORT"
  wait_healthy "$BASE_PORT"
}

start_replicas() {  # $1 = store name: replica A on REPLICA_PORT, B on PORT
  local url
  url="$(store_url "$1")"
  pinned "$server_cpus" "$py" -m server.run.cli serve --port "$REPLICA_PORT" --store "$url" \
    --log-level warning >>"$OUT/server.log" 2>&1 &
  replica_pid=$!
  pinned "$server_cpus" "$py" -m server.run.cli serve --port "$PORT" --store "$url" \
    --log-level warning >>"$OUT/server.log" 2>&1 &
  server_pid=$!
  wait_healthy "$REPLICA_PORT"
  wait_healthy "$PORT"
}

server_pin() {  # the --server-cpus/--client-cpus arguments of the runs started next
  [ -n "$server_cpus" ] && echo "--server-cpus $server_cpus"
  [ -n "$client_cpus" ] && echo "--client-cpus $client_cpus"
  true
}

bench() {  # $1 = name, $2 = store, $3 = run, then `tsync bench` arguments
  local name="$1" store="$2" run="$3"
  shift 3
  local out="$OUT/$name-$store-$run.json"
  echo "== $name ($store) run $run: tsync bench $*" >&2
  # shellcheck disable=SC2046
  "$py" -m server.run.cli bench "$@" --url "ws://127.0.0.1:$PORT/v1/ws" \
    --compare "ws://127.0.0.1:$BASE_PORT/v1/ws" \
    --server-pid "$server_pid" --compare-pid "$baseline_pid" $(server_pin) \
    "${common[@]}" --label "tsync ($store)" --json "$out" >"$OUT/$name-$store-$run.md" \
    || echo "   (run reported failures: see $out)" >&2
}

start_ds() {  # $1 = store name: tsync serve on PORT, the Node reference on BASE_PORT
  local url
  url="$(store_url "$1")"
  pinned "$server_cpus" "$py" -m server.run.cli serve --port "$PORT" --store "$url" \
    --log-level warning --set max_http_connections=3000 >>"$OUT/server.log" 2>&1 &
  server_pid=$!
  pinned "$server_cpus" node scripts/ds_reference/serve.mjs --port "$BASE_PORT" \
    >>"$OUT/baseline.log" 2>&1 &
  baseline_pid=$!
  wait_healthy "$PORT"
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$BASE_PORT/" && return 0
    sleep 0.1
  done
  echo "the Node reference server on port $BASE_PORT did not come up" >&2
  return 1
}

bench_ds() {  # $1 = name, $2 = store, $3 = run, then `tsync bench streams` arguments
  local name="$1" store="$2" run="$3"
  shift 3
  local out="$OUT/$name-$store-$run.json"
  echo "== $name ($store) run $run: tsync bench streams $*" >&2
  # shellcheck disable=SC2046
  "$py" -m server.run.cli bench streams "$@" --url "http://127.0.0.1:$PORT" \
    --compare "http://127.0.0.1:$BASE_PORT" --compare-label "node reference" \
    --server-pid "$server_pid" --compare-pid "$baseline_pid" $(server_pin) \
    --procs "$PROCS" --no-progress --label "tsync ($store)" --json "$out" \
    >"$OUT/$name-$store-$run.md" || echo "   (run reported failures: see $out)" >&2
}

start_tsync() {  # $1 = store name: tsync serve alone on PORT (aichat compares within one run)
  local url
  url="$(store_url "$1")"
  pinned "$server_cpus" "$py" -m server.run.cli serve --port "$PORT" --store "$url" \
    --log-level warning >>"$OUT/server.log" 2>&1 &
  server_pid=$!
  wait_healthy "$PORT"
}

bench_aichat() {  # $1 = name, $2 = store, $3 = run, then `tsync bench aichat` arguments
  local name="$1" store="$2" run="$3"
  shift 3
  local out="$OUT/$name-$store-$run.json"
  echo "== $name ($store) run $run: tsync bench aichat $*" >&2
  # shellcheck disable=SC2046
  "$py" -m server.run.cli bench aichat "$@" --url "ws://127.0.0.1:$PORT/v1/ws" \
    --server-pid "$server_pid" $(server_pin) --procs "$PROCS" --no-progress --json "$out" \
    >"$OUT/$name-$store-$run.md" || echo "   (run reported failures: see $out)" >&2
}

bench_replicas() {  # $1 = name, $2 = store, $3 = run, then `tsync bench` arguments
  local name="$1" store="$2" run="$3"
  shift 3
  local out="$OUT/$name-$store-$run.json"
  echo "== $name ($store, writer on A, subscribers on B) run $run: tsync bench $*" >&2
  # shellcheck disable=SC2046
  "$py" -m server.run.cli bench "$@" --url "ws://127.0.0.1:$PORT/v1/ws" \
    --writer-url "ws://127.0.0.1:$REPLICA_PORT/v1/ws" --server-pid "$server_pid" $(server_pin) \
    "${common[@]}" --label "tsync ($store, cross-replica)" --json "$out" \
    >"$OUT/$name-$store-$run.md" || echo "   (run reported failures: see $out)" >&2
}

start_cluster() {  # three masters on CLUSTER_PORTS, no replicas
  local nodes=()
  for p in $CLUSTER_PORTS; do
    rm -rf "/tmp/tsync-bench-cluster/$p"
    mkdir -p "/tmp/tsync-bench-cluster/$p"
    redis-server --port "$p" --bind 127.0.0.1 --cluster-enabled yes \
      --cluster-config-file nodes.conf --dir "/tmp/tsync-bench-cluster/$p" --save '' \
      --appendonly no --cluster-require-full-coverage no >>"$OUT/cluster.log" 2>&1 &
    cluster_pids="$cluster_pids $!"
    nodes+=("127.0.0.1:$p")
  done
  for p in $CLUSTER_PORTS; do
    for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
  done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >>"$OUT/cluster.log"
  for p in $CLUSTER_PORTS; do
    for _ in $(seq 100); do
      redis-cli -p "$p" cluster info | grep -q 'cluster_state:ok' && break
      sleep 0.1
    done
  done
}

wanted() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }

CLIENT_QUOTA="${CLIENT_QUOTA:-0.6}"
WORKERS_RATE="${WORKERS_RATE:-1000}"  # appends/s of ceilworkers (x 500 subscribers)
quota_group=""
make_quota_group() {  # a cgroup capping the generator at CLIENT_QUOTA CPUs
  local period=100000 quota
  quota="$(awk -v q="$CLIENT_QUOTA" 'BEGIN { printf "%d", q * 100000 }')"
  if [ -w /sys/fs/cgroup/cpu ]; then  # v1
    quota_group="/sys/fs/cgroup/cpu/tsync-bench-$$"
    mkdir -p "$quota_group"
    echo "$period" >"$quota_group/cpu.cfs_period_us"
    echo "$quota" >"$quota_group/cpu.cfs_quota_us"
  elif [ -w /sys/fs/cgroup/cgroup.subtree_control ]; then  # v2
    quota_group="/sys/fs/cgroup/tsync-bench-$$"
    mkdir -p "$quota_group"
    echo "$quota $period" >"$quota_group/cpu.max"
  else
    echo "no writable cgroup cpu controller: cannot cap the generator" >&2
    return 1
  fi
}
in_quota() {  # run the command in the quota group (a subshell joins it, then execs)
  (echo "$BASHPID" >"$quota_group/cgroup.procs" && exec "$@")
}
remove_quota_group() {
  [ -n "$quota_group" ] && rmdir "$quota_group" 2>/dev/null
  quota_group=""
  true
}

trap 'stop_servers; remove_quota_group; for pid in $redis_pid $cluster_pids; do kill "$pid" 2>/dev/null; done; true' EXIT

if [[ " $STORES " == *" redis "* ]] || wanted workers || wanted replicas || { [ "$MODE" = ceiling ] && wanted ceilworkers; }; then
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
    if wanted stream500; then
      start_servers "$store"
      bench stream500 "$store" "$run" stream --subscribers 500 --writers 1 --rate 50 --tokens 50 --duration 10
      stop_servers
    fi
    if wanted ds1000sse; then
      start_ds "$store"
      bench_ds ds1000sse "$store" "$run" --live sse --subscribers 1000 --rate 50 --duration 10 \
        --drain-timeout 120
      stop_servers
    fi
    if wanted ds1000lp; then
      start_ds "$store"
      bench_ds ds1000lp "$store" "$run" --live long-poll --subscribers 1000 --rate 50 \
        --duration 10 --drain-timeout 120
      stop_servers
    fi
    if wanted aichat1000; then
      start_tsync "$store"
      bench_aichat aichat1000 "$store" "$run" --subscribers 1000 --rate 50 --duration 10 \
        --drain-timeout 120
      stop_servers
    fi
    if wanted ceil500; then
      start_servers "$store"
      bench ceil500 "$store" "$run" fanout --ceiling --subscribers 500 --count 2000 --rate 1000 --size 200 --drain-timeout 240
      stop_servers
    fi
    if wanted ceil1000x100; then
      start_servers "$store"
      bench ceil1000x100 "$store" "$run" fanout --ceiling --subscribers 1000 --rate 100 --duration 6 --size 200 --drain-timeout 120
      stop_servers
    fi
    if wanted ceil1000x400; then  # past the ceiling: the server falls behind
      start_servers "$store"
      bench ceil1000x400 "$store" "$run" fanout --ceiling --subscribers 1000 --rate 400 --duration 5 --size 200 --drain-timeout 120
      stop_servers
    fi
    if wanted lat1000x50; then  # issue 30 item 1: the p99 with a generator that does not saturate
      start_servers "$store"
      bench lat1000x50 "$store" "$run" fanout --ceiling --subscribers 1000 --rate 50 --duration 6 --size 200 --drain-timeout 120
      stop_servers
    fi
    if wanted stream500pause; then
      start_servers "$store"
      bench stream500pause "$store" "$run" stream --subscribers 500 --writers 1 --rate 50 --tokens 50 --duration 10 --pause-one 5
      stop_servers
    fi
  done
done

if [ "$MODE" = issue15 ]; then
  for run in $(seq "$RUNS"); do
    if wanted workers; then
      # One worker against two on the burst, the server on WORKERS_CPUS.
      # The generator stays unpinned: its CPUs would overlap the server's.
      server_cpus="$WORKERS_CPUS"
      client_cpus=""
      for n in 1 2; do
        start_servers redis --workers "$n"
        bench "workers$n" redis "$run" fanout --subscribers 500 --count 2000 --rate 1000 \
          --size 200 --drain-timeout 240
        stop_servers
      done
      server_cpus="$SERVER_CPUS"
      client_cpus="$CLIENT_CPUS"
    fi
    if wanted replicas; then
      [ -z "$cluster_pids" ] && start_cluster
      for store in redis cluster; do
        start_replicas "$store"
        bench_replicas replicas1000x50 "$store" "$run" fanout --subscribers 1000 --rate 50 \
          --duration 6 --size 200 --drain-timeout 120
        stop_servers
      done
    fi
  done
fi

if [ "$MODE" = ceiling ] && wanted ceilworkers; then
  # --workers 1 against 2, the server on every CPU, the generator capped at
  # CLIENT_QUOTA CPUs by a cgroup (on any CPU): the workers have the rest.
  make_quota_group
  server_cpus="$WORKERS_CPUS"
  client_cpus=""
  for run in $(seq "$RUNS"); do
    for n in 1 2; do
      start_servers redis --workers "$n"
      in_quota "$py" -m server.run.cli bench fanout --ceiling --subscribers 500 \
        --count "$((2 * WORKERS_RATE))" --rate "$WORKERS_RATE" --size 200 --drain-timeout 240 \
        --url "ws://127.0.0.1:$PORT/v1/ws" \
        --server-pid "$server_pid" --server-cpus "$server_cpus" "${common[@]}" \
        --label "tsync (redis, --workers $n)" --json "$OUT/ceilworkers$n-redis-$run.json" \
        >"$OUT/ceilworkers$n-redis-$run.md" || echo "   (run reported failures)" >&2
      stop_servers
    done
  done
  server_cpus="$SERVER_CPUS"
  client_cpus="$CLIENT_CPUS"
  remove_quota_group
fi

# Throughput against the number of subscribers (one run each, embedded store).
if wanted sweep; then
  for n in 100 250 500 1000; do
    start_servers sqlite
    bench "sweep$n" sqlite 1 fanout --subscribers "$n" --count 500 --rate 1000 --size 200
    stop_servers
  done
fi

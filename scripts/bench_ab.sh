#!/usr/bin/env bash
# The same workload against two versions of the server in one run: this
# checkout ("new") and another checkout ("old", e.g. a worktree at an earlier
# commit), both `tsync serve` on SERVER_CPUS (default 0), the generator on
# CLIENT_CPUS (default 1), through `tsync bench ... --compare`, so that the
# ratio new / old is taken on the same machine at the same time.
#
#   git worktree add /tmp/old e54b4fc
#   scripts/bench_ab.sh /tmp/old memory chatroom --subscribers 200 --transcripts 50 \
#       --writers 50 --rate 5 --duration 8        # RUNS=3 for three runs
#
# Both servers run with this checkout's virtualenv; the old one imports its
# own code (it starts in its checkout, which comes first on sys.path).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
old="$(cd "$1" && pwd)"; store="$2"; shift 2
py="${PYTHON:-$root/.venv/bin/python}"
runs="${RUNS:-1}"
server_cpus="${SERVER_CPUS:-0}"
client_cpus="${CLIENT_CPUS:-1}"
out="${OUT:-/tmp/bench-ab}"
mkdir -p "$out"
for run in $(seq "$runs"); do
  data="$(mktemp -d)"
  if [ "$store" = sqlite ]; then new_store="sqlite:$data/new"; old_store="sqlite:$data/old"; else new_store="$store"; old_store="$store"; fi
  (cd "$root" && exec taskset -c "$server_cpus" "$py" -m server.run.cli serve --port 8831 --store "$new_store" --log-level warning) &
  new_pid=$!
  (cd "$old" && exec taskset -c "$server_cpus" "$py" -m server.run.cli serve --port 8832 --store "$old_store" --log-level warning) &
  old_pid=$!
  for _ in $(seq 100); do
    curl -sf http://127.0.0.1:8831/healthz >/dev/null && curl -sf http://127.0.0.1:8832/healthz >/dev/null && break
    sleep 0.1
  done
  (cd "$root" && taskset -c "$client_cpus" "$py" -m server.run.cli bench "$@" \
      --url ws://127.0.0.1:8831/v1/ws --server-pid "$new_pid" \
      --compare ws://127.0.0.1:8832/v1/ws --compare-pid "$old_pid" \
      --label new --compare-label old --fast --no-progress --json "$out/ab-$store-$run.json") || true
  kill -INT "$new_pid" "$old_pid"
  wait "$new_pid" "$old_pid" 2>/dev/null || true
  rm -rf "$data"
done

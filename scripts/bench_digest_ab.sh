#!/usr/bin/env bash
# The digest's cost end to end (issue 29): the burst (500 x 2,000 x 200 B at
# 1,000/s) and 1,000 subscribers x 50 appends/s, each against a server WITHOUT
# the digest (the tree of $WITHOUT, default `main`, run from a copy) and one
# WITH it (this tree), alternating in one run so that both see the same
# machine. The generator is this tree's `tsync bench` (--fast: envelopes only).
# Reports server CPU per delivered event for every run and the ratio of the
# medians.
#
#   scripts/bench_digest_ab.sh                   # RUNS=3 pairs of each
#   RUNS=2 ONLY=burst WITHOUT=<rev> scripts/bench_digest_ab.sh
#   scripts/bench_digest_ab.sh delivery          # the same two workloads with
#       scripts/measure_delivery.py's cheap clients (they only count frames,
#       so a busy generator hides less), RUNS=5 pairs, the order of each
#       pair alternating
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
py="${PYTHON:-$root/.venv/bin/python}"
RUNS="${RUNS:-3}"
ONLY="${ONLY:-burst x50}"
MODE="${1:-bench}"
WITHOUT="${WITHOUT:-main}"
STORE="${STORE:-memory}"
OUT="${OUT:-/tmp/bench-digest}"
PORT=8821
mkdir -p "$OUT"
without_tree="$OUT/without-tree"
rm -rf "$without_tree" && mkdir -p "$without_tree"
git archive "$WITHOUT" | tar -x -C "$without_tree"

if [ "$MODE" = delivery ]; then
  for i in $(seq "${RUNS:-5}"); do
    if [ $((i % 2)) = 1 ]; then order="$without_tree $root"; else order="$root $without_tree"; fi
    for tree in $order; do
      side=with
      [ "$tree" = "$without_tree" ] && side=without
      r=$("$py" scripts/measure_delivery.py fanout --subscribers 1000 --rate 50 --count 300 \
        --store "$STORE" --tree "$tree" --reps 1 2>&1 | grep "^rep")
      echo "x50 $side $r load $(cut -d' ' -f1 /proc/loadavg)"
      r=$("$py" scripts/measure_delivery.py burst --subscribers 500 --count 2000 \
        --store "$STORE" --tree "$tree" --reps 1 2>&1 | grep "^rep")
      echo "burst $side $r load $(cut -d' ' -f1 /proc/loadavg)"
    done
  done | tee "$OUT/delivery.log"
  exit 0
fi

server_pid=""
start_server() {  # $1 = with|without
  if [ "$1" = without ]; then
    PYTHONPATH="$without_tree" "$py" -m server.run.cli serve --port "$PORT" --store "$STORE" \
      --log-level warning >>"$OUT/server.log" 2>&1 &
  else
    "$py" -m server.run.cli serve --port "$PORT" --store "$STORE" \
      --log-level warning >>"$OUT/server.log" 2>&1 &
  fi
  server_pid=$!
  for _ in $(seq 100); do
    "$py" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/healthz', timeout=1)" \
      2>/dev/null && return 0
    sleep 0.1
  done
  echo "server did not come up" >&2
  return 1
}
stop_server() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
}
trap stop_server EXIT

for run in $(seq "$RUNS"); do
  for name in $ONLY; do
    case "$name" in
      burst) args=(fanout --subscribers 500 --count 2000 --rate 1000 --size 200 --drain-timeout 240) ;;
      x50) args=(fanout --subscribers 1000 --rate 50 --duration 6 --size 200 --drain-timeout 120) ;;
      *) echo "unknown workload $name" >&2; exit 2 ;;
    esac
    for side in without with; do
      start_server "$side"
      echo "== $name $side run $run: tsync bench ${args[*]}" >&2
      "$py" -m server.run.cli bench "${args[@]}" --url "ws://127.0.0.1:$PORT/v1/ws" \
        --server-pid "$server_pid" --procs 2 --no-progress --fast --label "$side" \
        --json "$OUT/$name-$side-$run.json" >"$OUT/$name-$side-$run.md" \
        || echo "   (run reported failures: see $OUT/$name-$side-$run.json)" >&2
      stop_server
    done
  done
done

"$py" - "$OUT" "$ONLY" <<'EOF'
import json, statistics, sys
from pathlib import Path

out, names = Path(sys.argv[1]), sys.argv[2].split()
print("| workload | without: server CPU per delivery (runs) | with | ratio of medians | load at start |")
print("|---|---|---|---|---|")
for name in names:
    cells, medians, loads = [], [], []
    for side in ("without", "with"):
        values = []
        for path in sorted(out.glob(f"{name}-{side}-*.json")):
            data = json.loads(path.read_text())
            values.append(data["runs"][0]["server_cpu"]["cpu_us_per_delivered"])
            loads.append(data["machine"]["loadavg_at_start"][0])
        medians.append(statistics.median(values))
        cells.append(", ".join(f"{v:.2f}" for v in values) + f" µs (median {medians[-1]:.2f})")
    print(f"| {name} | {cells[0]} | {cells[1]} | {medians[1] / medians[0]:.3f} | "
          f"{min(loads):.1f}-{max(loads):.1f} |")
EOF

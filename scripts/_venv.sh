# Sourced by scripts/serve, scripts/tsync, scripts/python, scripts/test and
# scripts/check: make sure .venv exists and holds this project (editable) with
# the extras the calling script needs ($need: "" for none, "dev" for tests and
# checks; TSYNC_EXTRAS overrides it). The extras installed are recorded in
# .venv/.tsync-installed: a later script that needs more installs them, so the
# scripts work in any order. Versions come from constraints.txt (pinned;
# ./scripts/lock upgrades it), so a new release upstream cannot break a build
# nobody changed. Re-installs when pyproject.toml or constraints.txt changed
# since. Needs only python3 >= 3.11 on PATH.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${TSYNC_VENV:-$root/.venv}"
py="${PYTHON:-python3}"
need="${TSYNC_EXTRAS-${need:-}}"
stamp="$venv/.tsync-installed"
first=0
if [ ! -x "$venv/bin/python" ]; then
  "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || {
    echo "transcript-sync needs Python 3.11+ (found $("$py" --version 2>&1))" >&2; exit 2; }
  echo "creating .venv and installing (first run, about a minute)" >&2
  "$py" -m venv "$venv"
  first=1
fi
have=""
[ -f "$stamp" ] && have="$(head -n 1 "$stamp")"
want="$(printf '%s\n' ${have//,/ } ${need//,/ } | sort -u | paste -sd, -)"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ] || [ "$root/constraints.txt" -nt "$stamp" ] || [ "$want" != "$have" ]; then
  if [ "$first" = 0 ]; then
    echo "installing ${want:+the $want extras of }transcript-sync into .venv (about a minute)" >&2
  fi
  log="$venv/install.log"
  if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      -c "$root/constraints.txt" -e "$root${want:+[$want]}" >"$log" 2>&1; then
    echo "installing into $venv failed (full log: $log):" >&2
    tail -n 15 "$log" >&2
    exit 1
  fi
  echo "$want" >"$stamp"
fi
export PATH="$venv/bin:$PATH"

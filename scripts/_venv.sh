# Sourced by scripts/serve and scripts/test: make sure .venv exists and holds
# this project (editable) with its dev extras. Re-installs when pyproject.toml
# changed since the last install. Needs only python3 >= 3.11 on PATH.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${TSYNC_VENV:-$root/.venv}"
py="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "transcript-sync needs Python 3.11+ (found $("$py" --version 2>&1))" >&2; exit 2; }
  "$py" -m venv "$venv"
fi
stamp="$venv/.tsync-installed"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q -e "$root[${TSYNC_EXTRAS:-dev}]" >&2
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"

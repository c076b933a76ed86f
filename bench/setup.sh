#!/usr/bin/env bash
# Create bench/.venvs/osmosis: a Python >= 3.12 virtual environment with osmosis-ai 0.3.8
# and its `server` extra (FastAPI, uvicorn: osmosis's own rollout server, which the serve
# family measures), the comparison point of workload 1 and the trainer tests/serve drive
# `osmo-run serve` with (.ci/run calls this). Idempotent: does nothing when it is already there.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venvs/osmosis"
want="0.3.8"

if [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$want" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
import osmosis_ai.rollout.server.app  # the server extra
sys.exit(version("osmosis-ai") != sys.argv[1])
PY
then
  echo "bench/setup.sh: $venv already has osmosis-ai[server] $want"
  exit 0
fi

python="$("$here/../scripts/find-python")"
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
  echo "bench/setup.sh: osmosis-ai $want needs Python >= 3.12; found only $python" >&2
  exit 1
fi
rm -rf "$venv"
mkdir -p "$here/.venvs"
"$python" -m venv "$venv"
# (pip's notes about this machine's unused local indexes are dropped; errors still show)
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "osmosis-ai[server]==$want" \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
echo "bench/setup.sh: created $venv with osmosis-ai[server] $want ($("$venv/bin/python" -V))"

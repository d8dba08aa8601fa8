#!/usr/bin/env bash
# Set up the workbench: check Python and Java, create .venv, install scabbard and its tools.
# Idempotent; `make setup` calls it.  Nothing needs to be activated by hand afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "setup: $PYTHON not found; scabbard needs Python 3.11+ (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "setup: $("$PYTHON" --version 2>&1) is too old; scabbard needs Python 3.11+ (set PYTHON=...)" >&2
  exit 1
fi

# Spark (the dataset generators, the Spark backend and peer) needs Java 17+.
scripts/check-java.sh

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
echo "setup: installing scabbard and its dependencies into $VENV (first time: about 2 minutes)"
# (a machine-wide pip configuration may name local index folders that do not exist; pip warns
# once per package about those - drop that noise, keep every other message)
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[dev]" \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
# the package's bytecode: an editable install writes none while PYTHONDONTWRITEBYTECODE is set,
# and every engine process - a cold restart after a crash among them - would compile the
# package from source (230 ms of a restart here)
"$VENV/bin/python" -m compileall -q scabbard
echo "setup: done ($("$VENV/bin/python" --version), $("$VENV/bin/python" -c 'import pyspark, numba; print("pyspark", pyspark.__version__, "numba", numba.__version__)'))"

#!/usr/bin/env bash
# Set up the Flink peer: create .venv-flink and install PyFlink (apache-flink) into it.
#
# PyFlink pins py4j, pandas < 2.3, numpy < 2.2 and pyarrow < 17, which clash with the
# project's own environment (.venv: pyspark, numba, pandas/numpy/pyarrow of today), so it
# lives in an environment of its own.  scabbard.peers.flink runs its jobs with this
# environment's python; nothing needs to be activated by hand.
#
# Idempotent: a stamp file records the installed version, so a second call returns at once.
# About 1 minute and 850 MB the first time.  Needs Java 17+ (the same as Spark).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${FLINK_VENV:-.venv-flink}
FLINK_VERSION=2.3.0
STAMP="$VENV/.installed-apache-flink-$FLINK_VERSION"

if [ -f "$STAMP" ] && [ -x "$VENV/bin/python" ]; then
  echo "setup-flink: apache-flink $FLINK_VERSION already in $VENV"
  exit 0
fi
start=$(date +%s)

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "setup-flink: $PYTHON not found; PyFlink $FLINK_VERSION needs Python 3.10-3.12 (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 12) else 1)'; then
  echo "setup-flink: $("$PYTHON" --version 2>&1) has no apache-flink $FLINK_VERSION wheels; use Python 3.10-3.12 (set PYTHON=...)" >&2
  exit 1
fi
# Flink runs on the JVM, like Spark: Java 17+.
scripts/check-java.sh | sed 's/^setup:/setup-flink:/'

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup-flink: creating $VENV"
  if ! "$PYTHON" -m venv "$VENV"; then
    echo "setup-flink: '$PYTHON -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
    exit 1
  fi
fi
# keep the environment out of git, whatever the repository's .gitignore says (as venv does on 3.13+)
echo '*' > "$VENV/.gitignore"
echo "setup-flink: installing apache-flink $FLINK_VERSION into $VENV (first time: about 1 minute, 850 MB)"
# (a machine-wide pip configuration may name local index folders that do not exist; pip warns
# once per package about those - drop that noise, keep every other message)
if ! "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "apache-flink==$FLINK_VERSION" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); then
  echo "setup-flink: pip could not install apache-flink $FLINK_VERSION into $VENV (see above)" >&2
  exit 1
fi
if ! "$VENV/bin/python" -c 'import pyflink.table' 2>/dev/null; then
  echo "setup-flink: apache-flink installed but 'import pyflink.table' fails in $VENV; remove $VENV and run again" >&2
  exit 1
fi
touch "$STAMP"
echo "setup-flink: done in $(( $(date +%s) - start )) s ($VENV: $(du -sh "$VENV" | cut -f1), apache-flink $FLINK_VERSION)"

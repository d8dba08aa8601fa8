#!/usr/bin/env bash
# Exit 0 if a Java 17+ runtime is available the way Spark looks for it (JAVA_HOME, then PATH);
# otherwise say what to do and exit 1.
set -u
hint="install one with 'make java' (Debian/Ubuntu, runs apt-get) or 'sudo apt-get install -y openjdk-17-jre-headless', or set JAVA_HOME"
if [ -n "${JAVA_HOME:-}" ]; then
  java="$JAVA_HOME/bin/java"
  [ -x "$java" ] || { echo "setup: JAVA_HOME=$JAVA_HOME has no bin/java; Spark needs Java 17+: $hint" >&2; exit 1; }
else
  java=$(command -v java || true)
  [ -n "$java" ] || { echo "setup: no 'java' on PATH; Spark needs Java 17+: $hint" >&2; exit 1; }
fi
version=$("$java" -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n 1)
major=${version%%.*}
[ "$major" = "1" ] && major=$(echo "$version" | cut -d. -f2)
if ! [ "$major" -ge 17 ] 2>/dev/null; then
  echo "setup: $java is Java ${version:-unknown}; Spark needs Java 17+: $hint" >&2
  exit 1
fi
echo "setup: Java $version ($java)"

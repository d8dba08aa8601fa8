#!/usr/bin/env bash
# Set up the peers the benchmarks run side by side with the engine (paper §6.2-6.4):
#   - RabbitMQ with its stream plugin (the persistent broker standing in for Kafka), from the
#     Debian package rabbitmq-server.  It is only installed here, never started as a service:
#     scabbard.peers.broker starts a private node on 127.0.0.1 for each run and stops it.
#   - PyFlink in its own environment, .venv-flink (scripts/setup-flink.sh).
# Idempotent; `make peers` (and so `make test` and `make bench`) calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] && command -v epmd >/dev/null 2>&1; then
  echo "setup-peers: RabbitMQ $(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null || echo '(version unknown)') is installed"
elif source scripts/apt-root.sh && apt_root setup-peers RabbitMQ rabbitmq-server \
    "install RabbitMQ 3.10+ (with its stream plugin) so that /usr/lib/rabbitmq/bin/rabbitmq-server exists"; then
  echo "setup-peers: installing rabbitmq-server with apt-get (about 30 s)"
  # Debian starts a package's service on install; ours runs privately, so forbid that start
  # for the length of the install (the policy-rc.d convention; an existing policy is kept).
  policy=/usr/sbin/policy-rc.d
  own_policy=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod +x "$policy"
    own_policy=1
  fi
  trap 'if [ -n "$own_policy" ]; then $SUDO rm -f "$policy"; fi' EXIT
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends rabbitmq-server >/dev/null
  echo "setup-peers: RabbitMQ $(dpkg-query -W -f='${Version}' rabbitmq-server) installed"
fi

scripts/setup-flink.sh

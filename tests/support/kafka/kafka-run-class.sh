#!/usr/bin/env bash
# Usage: kafka-run-class.sh CLASS [ARGS...]
# Runs a Kafka main class with the jars fetched by fetch.sh ($DEST/libs,
# DEST defaulting to tests/.deps/kafka under the repo root) and a quiet log4j2
# configuration (WARN+ to stderr). Env: DEST, JAVA (default java),
# KAFKA_HEAP_OPTS, KAFKA_OPTS (extra JVM options), KAFKA_LOG4J_CONFIG.
# Examples:
#   kafka-run-class.sh org.apache.kafka.tools.DumpLogSegments --files X.log --print-data-log
#   kafka-run-class.sh kafka.Kafka server.properties
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 CLASS [ARGS...]" >&2
  exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
DEST="${DEST:-tests/.deps/kafka}"
case "$DEST" in /*) ;; *) DEST="$root/$DEST" ;; esac
libs="$DEST/libs"

if ! ls "$libs"/kafka-clients-*.jar >/dev/null 2>&1; then
  echo "kafka-run-class.sh: no Kafka jars in $libs; run tests/support/kafka/fetch.sh first" >&2
  exit 2
fi

log4j="${KAFKA_LOG4J_CONFIG:-$here/log4j2.properties}"

# shellcheck disable=SC2086
exec "${JAVA:-java}" ${KAFKA_HEAP_OPTS:-} ${KAFKA_OPTS:-} \
  -Dlog4j2.configurationFile="$log4j" \
  -Dlog4j2.statusLoggerLevel=ERROR \
  -cp "$libs/*" "$@"

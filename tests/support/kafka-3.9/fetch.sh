#!/usr/bin/env bash
# Fetch Apache Kafka 3.9's jars (pom.xml beside this script; the last
# ZooKeeper-mode line, zookeeper jar included) from Maven Central into
# $DEST/libs (default tests/.deps/kafka-3.9), for ../kafka/kafka-run-class.sh
# (run it with DEST=tests/.deps/kafka-3.9). Same fetch as ../kafka/fetch.sh.
# Env: DEST, MVN_TIMEOUT (seconds, default 900).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$here/pom.xml" DEST="${DEST:-tests/.deps/kafka-3.9}" exec "$here/../kafka/fetch.sh"

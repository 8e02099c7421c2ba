#!/usr/bin/env bash
# Fetch Apache Kafka's jars (the dependencies of pom.xml beside this script, or
# of $POM) from Maven Central into $DEST/libs, for kafka-run-class.sh.
# Idempotent: does nothing if the jars of this very pom are already there (the
# marker names the pom's hash, so a changed pom fetches again). DEST defaults to
# tests/.deps/kafka (repo root).
# Env: POM, DEST, MVN_TIMEOUT (seconds, default 900).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
cd "$root"

DEST="${DEST:-tests/.deps/kafka}"
libs="$DEST/libs"
pom="${POM:-tests/support/kafka/pom.xml}"
marker="$libs/.complete-$(sha256sum "$pom" | cut -c1-16)"

if [ -f "$marker" ]; then
  (cd "$libs" && pwd)
  exit 0
fi

apt_install() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "fetch.sh: need $* but not root; install it first" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  timeout 600 apt-get update -qq >&2 || true
  timeout 900 apt-get install -y -qq "$@" >&2
}

command -v java >/dev/null 2>&1 || apt_install default-jre-headless
command -v mvn  >/dev/null 2>&1 || apt_install maven

# Start clean so jars of another version don't end up on the classpath.
rm -rf "$libs"
mkdir -p "$libs"
log="$DEST/fetch.log"
if ! timeout "${MVN_TIMEOUT:-900}" mvn -q -B -Dstyle.color=never -f "$pom" \
     dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$(cd "$libs" && pwd)" \
     >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "fetch.sh: mvn dependency:copy-dependencies failed or timed out (log: $log)" >&2
  rm -rf "$libs"
  exit 1
fi
touch "$marker"
(cd "$libs" && pwd)

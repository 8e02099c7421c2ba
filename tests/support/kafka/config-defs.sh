#!/usr/bin/env bash
# Regenerates config/kafka-config-defs.tsv (repo root) from Apache Kafka's own
# jars: the config definitions Kafka ships, dumped by ConfigDefs.java beside
# this script. Sections, each a header line then ConfigDefs' output:
#   # topic <4.x>      topic configs       (tests/support/kafka, pom.xml version)
#   # topic <3.9.x>    topic configs       (tests/support/kafka-3.9)
#   # broker <3.9.x>   broker configs      (kafka.server.KafkaConfig, 3.9)
#   # synonyms <4.x>   topic -> broker synonyms, most specific first
# Fetches the jars first (both fetch.sh scripts; idempotent). Output is
# deterministic for a given JDK (a few SSL defaults come from the JVM).
# Env: OUT (default config/kafka-config-defs.tsv), JAVA, JAVA_TIMEOUT (s, default 180).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
cd "$root"

OUT="${OUT:-config/kafka-config-defs.tsv}"
pom_version() { sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$1"; }
v4="$(pom_version tests/support/kafka/pom.xml)"
v3="$(pom_version tests/support/kafka-3.9/pom.xml)"
[ -n "$v4" ] && [ -n "$v3" ] || { echo "config-defs.sh: no <kafka.version> in the poms" >&2; exit 1; }

libs4="$(tests/support/kafka/fetch.sh)"
libs3="$(tests/support/kafka-3.9/fetch.sh)"

dump() { # LIBS SCOPE
  local out
  out="$(timeout "${JAVA_TIMEOUT:-180}" "${JAVA:-java}" \
           -Dlog4j2.configurationFile="$here/log4j2.properties" -Dlog4j2.statusLoggerLevel=ERROR \
           -cp "$1/*" "$here/ConfigDefs.java" "$2")" || {
    echo "config-defs.sh: ConfigDefs $2 failed (classpath $1)" >&2; exit 1; }
  [ -n "$out" ] || { echo "config-defs.sh: ConfigDefs $2 printed nothing (classpath $1)" >&2; exit 1; }
  printf '%s\n' "$out"
}

mkdir -p "$(dirname "$OUT")"
tmp="$(mktemp "${OUT}.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
{
  echo "# topic $v4";    dump "$libs4" topic
  echo "# topic $v3";    dump "$libs3" topic
  echo "# broker $v3";   dump "$libs3" broker
  echo "# synonyms $v4"; dump "$libs4" synonyms
} >"$tmp"
chmod 644 "$tmp"
mv "$tmp" "$OUT"
trap - EXIT
echo "$OUT: $(wc -c <"$OUT") bytes"
awk '/^# /{s=substr($0,3); n[s]=0; o[++k]=s; next} {n[s]++} END{for(i=1;i<=k;i++) printf "  %-16s %d\n", o[i], n[o[i]]}' "$OUT"

"""Parses a Prometheus text exposition from stdin with prometheus_client's own
parser (a malformed exposition raises) and prints every sample as JSON lines:
{"name": ..., "labels": {...}, "value": ...}."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        print(json.dumps({"name": sample.name, "labels": sample.labels, "value": sample.value}))

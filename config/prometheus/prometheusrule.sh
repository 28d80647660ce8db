#!/usr/bin/env bash
# Prints config/prometheus/prometheusrule.yaml: a PrometheusRule header, then the groups of
# flotilla-rules.yaml under `spec:` (tests/tests/alerts.rs checks that the two agree).
set -euo pipefail
cd "$(dirname "$0")"
cat <<'HEADER'
# The rules of flotilla-rules.yaml as a PrometheusRule for the Prometheus Operator (kept
# identical by tests/tests/alerts.rs). Its Prometheus must select it: label it as your
# Prometheus' ruleSelector asks (kube-prometheus-stack: `release: <its release name>`).
# Regenerate after editing flotilla-rules.yaml:
#   bash config/prometheus/prometheusrule.sh > config/prometheus/prometheusrule.yaml
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: flotilla
  namespace: kube-federation-system
  labels:
    app.kubernetes.io/name: flotilla
spec:
HEADER
sed -n '/^groups:/,$p' flotilla-rules.yaml | sed 's/^/  /'

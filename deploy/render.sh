#!/usr/bin/env bash
# Render the plain manifests in deploy/ from the Helm chart (for users without Helm).
#
#   bash deploy/render.sh [OUTDIR]     # default: deploy/ ; `make generate` runs it
#
# deploy/ai4dl-operator.yaml  everything: Namespace ai4dl-system, the CRD, ServiceAccount, RBAC,
#                             Deployment, metrics Service; Prometheus URL is a placeholder to edit
# deploy/rbac.yaml            just the ServiceAccount, its RBAC and the admission policy that limits
#                             its pod writes (the operator integration tests apply it)
# tests/test_helm.py re-renders into a temporary folder and fails when deploy/ is out of date.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/deploy}"
HELM="${HELM:-${AI4DL_CACHE:-$HOME/.cache/ai4dl}/bin/helm}"
[[ -x "$HELM" ]] || { echo "render.sh: error: no helm at $HELM (run: bash e2e/helm/build.sh)" >&2; exit 2; }

RELEASE=ai4dl-operator
NAMESPACE=ai4dl-system
PLACEHOLDER_URL=http://prometheus-server.monitoring.svc:9090
PLACEHOLDER_IMAGE=ai4dl-operator     # the image you build and push (no registry publishes one)
CHART="$ROOT/charts/ai4dl-operator"

header() {
  printf '# Rendered from charts/ai4dl-operator by deploy/render.sh (`make generate`): do not edit.\n'
  printf '# helm template %s charts/ai4dl-operator --namespace %s %s\n' "$RELEASE" "$NAMESPACE" "$1"
}
# helm's output starts with "---"; drop it so the header belongs to the first document.
template() { "$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" "$@" | sed '1{/^---$/d}'; }

mkdir -p "$OUT"
{
  header "--include-crds --set prometheus.url=$PLACEHOLDER_URL --set image.repository=$PLACEHOLDER_IMAGE --set operator.stateKey.existingSecret=$RELEASE-state-key"
  printf '# Edit the Prometheus URL (--prometheus-url below) and the image (image: below, the one you built and pushed:\n'
  printf '# docker build --target operator -t REGISTRY/ai4dl-operator:TAG .), then: kubectl apply --server-side -f deploy/ai4dl-operator.yaml\n'
  printf '# and make the key that seals the operator'"'"'s records on pods (once; the operator reads no Secret, the kubelet mounts it):\n'
  printf '#   kubectl -n %s create secret generic %s-state-key --from-literal=key="$(head -c 32 /dev/urandom | base64)"\n' "$NAMESPACE" "$RELEASE"
  cat <<NS
apiVersion: v1
kind: Namespace
metadata:
  name: $NAMESPACE
  labels:
    app.kubernetes.io/part-of: ai4dl
    pod-security.kubernetes.io/enforce: restricted
---
NS
  template --include-crds --set "prometheus.url=$PLACEHOLDER_URL" \
    --set "image.repository=$PLACEHOLDER_IMAGE" --set "operator.stateKey.existingSecret=$RELEASE-state-key"
} > "$OUT/ai4dl-operator.yaml.tmp"
{
  header "--show-only templates/serviceaccount.yaml --show-only templates/rbac.yaml --show-only templates/admissionpolicy.yaml"
  template --set "prometheus.url=$PLACEHOLDER_URL" --set "image.repository=$PLACEHOLDER_IMAGE" \
    --show-only templates/serviceaccount.yaml --show-only templates/rbac.yaml \
    --show-only templates/admissionpolicy.yaml
} > "$OUT/rbac.yaml.tmp"
mv -f "$OUT/ai4dl-operator.yaml.tmp" "$OUT/ai4dl-operator.yaml"
mv -f "$OUT/rbac.yaml.tmp" "$OUT/rbac.yaml"

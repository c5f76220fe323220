#!/usr/bin/env bash
# Build helm (v3) from the Go module proxy, for the chart tests (tests/test_helm.py).
#
# Like e2e/controlplane/build.sh: no Docker and no get.helm.sh needed; the binary goes to
#   ${AI4DL_CACHE:-$HOME/.cache/ai4dl}/bin/helm
# and the Go module/build caches are the control plane's (GOMODCACHE=$CACHE/go/mod,
# GOCACHE=$CACHE/go/build), so the two builds share downloads and compiled packages.
# Idempotent: when bin/helm exists and reports the expected version, it exits at once.
#
# Environment:
#   AI4DL_CACHE          cache root (default ~/.cache/ai4dl)
#   AI4DL_HELM_VERSION   helm v3 version (default below)
#   AI4DL_GOMODCACHE, AI4DL_GOCACHE   other Go caches (default: the control plane's)
#   GO                   go binary (default: `go` on PATH, else /usr/local/go/bin/go)
#   AI4DL_BUILD_JOBS     go build -p (default 2)
set -euo pipefail

HELM_VERSION="${AI4DL_HELM_VERSION:-3.22.0}"
HELM_VERSION="v${HELM_VERSION#v}"
CACHE="${AI4DL_CACHE:-$HOME/.cache/ai4dl}"
BIN="$CACHE/bin"
JOBS="${AI4DL_BUILD_JOBS:-2}"

# shellcheck source=../go_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../go_env.sh"

log() { printf '[helm/build.sh %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

helm_ok() {
  local out
  [[ -x "$BIN/helm" ]] || return 1
  out="$("$BIN/helm" version --template '{{.Version}}' 2>/dev/null)" || return 1
  [[ "$out" == "$HELM_VERSION" ]]
}

if helm_ok; then
  log "up to date: helm $HELM_VERSION in $BIN"
  exit 0
fi
require_go

mkdir -p "$BIN"
exec 9>"$CACHE/helm-build.lock"
if ! flock -n 9; then log "another build holds $CACHE/helm-build.lock; waiting"; flock 9; fi
if helm_ok; then log "built meanwhile by another process"; exit 0; fi

export_go_env

T0=$SECONDS
out="$(mktemp -d "$CACHE/helm-build.XXXXXX")"
trap 'rm -rf "$out"' EXIT
# Stamp what helm's Makefile stamps: its version (go install alone reports none) and the
# Kubernetes version `helm template`/`helm lint` assume without a cluster (else v1.20), taken
# from the k8s.io/client-go helm is built with (v0.X.Y -> 1.X, as the Makefile does).
log "helm $HELM_VERSION: resolving helm.sh/helm/v3@$HELM_VERSION"
info="$("$GO" mod download -json "helm.sh/helm/v3@$HELM_VERSION")"
gomod="$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' <<<"$info")"
kminor="$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod" | head -n1)"
[[ -n "$kminor" ]] || { log "ERROR: no k8s.io/client-go version in $gomod"; exit 1; }
ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
ld+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ld+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$kminor"
done
# helm's go.mod has no replace directives, so `go install pkg@version` works as is.
log "helm $HELM_VERSION (default Kubernetes 1.$kminor): go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
GOBIN="$out" "$GO" install -trimpath -ldflags "$ld" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
mv -f "$out/helm" "$BIN/helm"
helm_ok || { log "ERROR: built $BIN/helm but it does not report $HELM_VERSION: $("$BIN/helm" version 2>&1)"; exit 1; }
log "helm $HELM_VERSION built in $((SECONDS - T0)) s: $("$BIN/helm" version --short)"

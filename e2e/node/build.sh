#!/usr/bin/env bash
# Build the kubelet for the real-node test tier, from the Go module proxy, exactly as
# e2e/controlplane/build.sh builds kube-apiserver (a throwaway main module that maps every
# k8s.io staging module to its published v0.X.Y; same Go caches, same version variables).
#   ${AI4DL_CACHE:-$HOME/.cache/ai4dl}/bin/kubelet
# Idempotent: when bin/kubelet exists and reports the expected version, it exits at once.
# Then unpacks containerd, runc and busybox (e2e/node/install.sh).
#
# Environment:
#   AI4DL_CACHE          cache root (default ~/.cache/ai4dl)
#   AI4DL_KUBE_VERSION   Kubernetes version, 1.33+ (default: the control plane's)
#   AI4DL_GOMODCACHE, AI4DL_GOCACHE   other Go caches (default: the control plane's)
#   GO                   go binary (default: `go` on PATH, else /usr/local/go/bin/go)
#   AI4DL_BUILD_JOBS     go build -p (default 2)
#   AI4DL_NODE_SKIP_INSTALL=1  only build the kubelet
set -euo pipefail

KUBE_VERSION="${AI4DL_KUBE_VERSION:-1.35.4}"
KUBE_VERSION="${KUBE_VERSION#v}"
CACHE="${AI4DL_CACHE:-$HOME/.cache/ai4dl}"
BIN="$CACHE/bin"
JOBS="${AI4DL_BUILD_JOBS:-2}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# shellcheck source=../go_env.sh
source "$HERE/../go_env.sh"

log() { printf '[node/build.sh %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

kubelet_ok() {
  local out
  [[ -x "$BIN/kubelet" ]] || return 1
  out="$("$BIN/kubelet" --version 2>/dev/null)" || return 1
  [[ "$out" == "Kubernetes v$KUBE_VERSION" ]]
}

install_runtime() {
  [[ "${AI4DL_NODE_SKIP_INSTALL:-0}" == 1 ]] || bash "$HERE/install.sh"
}

if kubelet_ok; then
  log "up to date: kubelet v$KUBE_VERSION in $BIN"
  install_runtime
  exit 0
fi
require_go

mkdir -p "$BIN" "$CACHE/src"
exec 9>"$CACHE/kubelet-build.lock"
if ! flock -n 9; then log "another build holds $CACHE/kubelet-build.lock; waiting"; flock 9; fi
if kubelet_ok; then log "built meanwhile by another process"; install_runtime; exit 0; fi

export_go_env

T0=$SECONDS
minor="$(cut -d. -f2 <<<"$KUBE_VERSION")"
if (( minor < 33 )); then log "ERROR: need Kubernetes >= 1.33 (in-place pod resize)"; exit 2; fi
# Its own folder (not the control plane's src/kubernetes-X, which build.sh rm -rf's).
dir="$CACHE/src/kubelet-$KUBE_VERSION"
log "kubelet v$KUBE_VERSION: resolving k8s.io/kubernetes@v$KUBE_VERSION"
rm -rf "$dir"; mkdir -p "$dir"; cd "$dir"
info="$("$GO" mod download -json "k8s.io/kubernetes@v$KUBE_VERSION")"
gomod="$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' <<<"$info")"
sha="$(sed -n 's/.*"Hash": "\([0-9a-f]*\)".*/\1/p' <<<"$info" | head -n1)"
mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/.*#\1#p' "$gomod")
if (( ${#staging[@]} < 20 )); then log "ERROR: found only ${#staging[@]} staging modules in $gomod"; exit 1; fi
mod_field() { sed -n "s/^$1 //p" "$2" | head -n1; }
godebug="$(mod_field godebug "$gomod")"
{
  printf 'module local/kubelet\n\ngo %s\n\n' "$(mod_field go "$gomod")"
  [[ -n "$godebug" ]] && printf 'godebug %s\n\n' "$godebug"
  for m in "${staging[@]}"; do printf 'replace %s => %s v0.%s\n' "$m" "$m" "${KUBE_VERSION#1.}"; done
} > go.mod
pkg=k8s.io/kubernetes/cmd/kubelet
log "kubelet: ${#staging[@]} staging replaces; go get $pkg"
"$GO" get "$pkg@v$KUBE_VERSION"
ld="-s -w"
for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld+=" -X $v.gitVersion=v$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor"
  ld+=" -X $v.gitTreeState=clean -X $v.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  [[ -n "$sha" ]] && ld+=" -X $v.gitCommit=$sha"
done
log "kubelet: compiling (CGO_ENABLED=0, like upstream's static kubelet)"
mkdir -p "$dir/bin"
"$GO" build -trimpath -o "$dir/bin/kubelet" -ldflags "$ld" "$pkg"
mv -f "$dir/bin/kubelet" "$BIN/kubelet"  # same filesystem: an atomic rename
kubelet_ok || { log "ERROR: built $BIN/kubelet but it does not report v$KUBE_VERSION"; exit 1; }
log "kubelet: done in $((SECONDS - T0)) s: $("$BIN/kubelet" --version)"
install_runtime

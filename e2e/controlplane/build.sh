#!/usr/bin/env bash
# Build a test control plane (kube-apiserver, etcd, kubectl) from the Go module proxy.
#
# No Docker and no dl.k8s.io needed: each tool is built from a throwaway Go main module
# that requires the component at its tagged version (e2e/controlplane/README.md). Binaries go to
#   ${AI4DL_CACHE:-$HOME/.cache/ai4dl}/bin/{kube-apiserver,etcd,kubectl}
# Idempotent: when every binary exists and reports the expected version, it exits at once.
#
# Environment:
#   AI4DL_CACHE          cache root (default ~/.cache/ai4dl); Go module + build caches live under it
#   AI4DL_KUBE_VERSION   Kubernetes version, 1.33+ (default below)
#   AI4DL_ETCD_VERSION   etcd version, >= 3.5.13 (default below)
#   AI4DL_SKIP_KUBECTL=1 do not build kubectl
#   GO                   go binary (default: `go` on PATH, else /usr/local/go/bin/go)
#   AI4DL_BUILD_JOBS     go build -p (default 2)
#   AI4DL_BUILD_CLEAN=1  after a successful build, delete the Go module/build caches (~3.3 GB)
#
# Cost measured on 2 cores (v1.35.4 + etcd 3.6.16 + kubectl): see e2e/controlplane/README.md.
set -euo pipefail

KUBE_VERSION="${AI4DL_KUBE_VERSION:-1.35.4}"
ETCD_VERSION="${AI4DL_ETCD_VERSION:-3.6.16}"
KUBE_VERSION="${KUBE_VERSION#v}"
ETCD_VERSION="${ETCD_VERSION#v}"
CACHE="${AI4DL_CACHE:-$HOME/.cache/ai4dl}"
BIN="$CACHE/bin"
JOBS="${AI4DL_BUILD_JOBS:-2}"

# shellcheck source=../go_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../go_env.sh"

log() { printf '[build.sh %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# (Capture first, then match: `cmd | grep -q` can SIGPIPE cmd, which fails under pipefail.)
has_line() { local out; out="$("${@:2}" 2>/dev/null)" || return 1; grep -qxF "$1" <<<"$out"; }
kube_ok() {  # $1 = binary name
  [[ -x "$BIN/$1" ]] || return 1
  case "$1" in
    kube-apiserver) has_line "Kubernetes v$KUBE_VERSION" "$BIN/kube-apiserver" --version ;;
    kubectl) has_line "Client Version: v$KUBE_VERSION" "$BIN/kubectl" version --client ;;
  esac
}
etcd_ok() {
  [[ -x "$BIN/etcd" ]] && has_line "etcd Version: $ETCD_VERSION" "$BIN/etcd" --version
}
want_kubectl() { [[ "${AI4DL_SKIP_KUBECTL:-0}" != 1 ]]; }
all_ok() { kube_ok kube-apiserver && etcd_ok && { ! want_kubectl || kube_ok kubectl; }; }

if all_ok; then
  log "up to date: kube-apiserver v$KUBE_VERSION, etcd $ETCD_VERSION$(want_kubectl && echo ", kubectl v$KUBE_VERSION") in $BIN"
  exit 0
fi

require_go

mkdir -p "$BIN" "$CACHE/src"
# One build at a time per cache (parallel pytest sessions, CI jobs sharing a cache).
exec 9>"$CACHE/build.lock"
if ! flock -n 9; then log "another build holds $CACHE/build.lock; waiting"; flock 9; fi
if all_ok; then log "built meanwhile by another process"; exit 0; fi

export_go_env

T0=$SECONDS

# The value of a one-line directive (`go`, `godebug`) in a go.mod file, or nothing.
mod_field() { sed -n "s/^$1 //p" "$2" | head -n1; }

# ---------------------------------------------------------------- etcd
build_etcd() {
  local t=$SECONDS dir="$CACHE/src/etcd-$ETCD_VERSION" info gomod sha
  log "etcd $ETCD_VERSION: resolving go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  rm -rf "$dir"; mkdir -p "$dir"; cd "$dir"
  info="$("$GO" mod download -json "go.etcd.io/etcd/server/v3@v$ETCD_VERSION")"
  gomod="$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' <<<"$info")"
  sha="$(sed -n 's/.*"Hash": "\([0-9a-f]*\)".*/\1/p' <<<"$info" | head -n1)"
  # Throwaway main module: go install refuses etcd's modules (they carry replace lines).
  printf 'module local/etcd\n\ngo %s\n' "$(mod_field go "$gomod")" > go.mod
  "$GO" get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  log "etcd: compiling"
  # proxy.golang.org's .info usually has no VCS Origin; then GitSHA keeps etcd's default.
  local ld="-s -w"
  [[ -n "$sha" ]] && ld+=" -X go.etcd.io/etcd/api/v3/version.GitSHA=${sha:0:9}"
  "$GO" build -trimpath -o "$dir/bin/etcd" -ldflags "$ld" go.etcd.io/etcd/server/v3
  mv -f "$dir/bin/etcd" "$BIN/etcd"  # same filesystem: an atomic rename
  log "etcd: done in $((SECONDS - t)) s: $("$BIN/etcd" --version | head -n1)"
}

# ---------------------------------------------------------------- kube-apiserver (+ kubectl)
build_kube() {
  local t=$SECONDS dir="$CACHE/src/kubernetes-$KUBE_VERSION" info gomod sha minor godebug m
  local -a staging pkgs
  minor="$(cut -d. -f2 <<<"$KUBE_VERSION")"
  if (( minor < 33 )); then log "ERROR: need Kubernetes >= 1.33 (pods/resize on by default)"; exit 2; fi
  log "kubernetes v$KUBE_VERSION: resolving k8s.io/kubernetes@v$KUBE_VERSION (large zip)"
  rm -rf "$dir"; mkdir -p "$dir"; cd "$dir"
  info="$("$GO" mod download -json "k8s.io/kubernetes@v$KUBE_VERSION")"
  gomod="$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' <<<"$info")"
  sha="$(sed -n 's/.*"Hash": "\([0-9a-f]*\)".*/\1/p' <<<"$info" | head -n1)"
  # Every staging module k8s.io/kubernetes maps to ./staging/src/... (31 in 1.33-1.35, 33 in 1.36).
  mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/.*#\1#p' "$gomod")
  if (( ${#staging[@]} < 20 )); then log "ERROR: found only ${#staging[@]} staging modules in $gomod"; exit 1; fi
  godebug="$(mod_field godebug "$gomod")"
  {
    printf 'module local/kubernetes\n\ngo %s\n\n' "$(mod_field go "$gomod")"
    # Same GODEBUG defaults as upstream's release builds.
    [[ -n "$godebug" ]] && printf 'godebug %s\n\n' "$godebug"
    for m in "${staging[@]}"; do printf 'replace %s => %s v0.%s\n' "$m" "$m" "${KUBE_VERSION#1.}"; done
  } > go.mod
  pkgs=(k8s.io/kubernetes/cmd/kube-apiserver)
  want_kubectl && pkgs+=(k8s.io/kubernetes/cmd/kubectl)
  log "kubernetes: ${#staging[@]} staging replaces; go get ${pkgs[*]}"
  # go get the packages (not just the module) so go.sum covers everything they import.
  "$GO" get "${pkgs[@]/%/@v$KUBE_VERSION}"
  local ld="-s -w"
  local v
  for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $v.gitVersion=v$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor"
    ld+=" -X $v.gitTreeState=clean -X $v.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    [[ -n "$sha" ]] && ld+=" -X $v.gitCommit=$sha"
  done
  log "kubernetes: compiling ${pkgs[*]}"
  mkdir -p "$dir/bin"
  "$GO" build -trimpath -o "$dir/bin/" -ldflags "$ld" "${pkgs[@]}"
  for m in kube-apiserver kubectl; do
    [[ -f "$dir/bin/$m" ]] || continue
    mv -f "$dir/bin/$m" "$BIN/$m"
  done
  log "kubernetes: done in $((SECONDS - t)) s: $("$BIN/kube-apiserver" --version)"
}

etcd_ok || build_etcd
{ kube_ok kube-apiserver && { ! want_kubectl || kube_ok kubectl; }; } || build_kube

all_ok || { log "ERROR: binaries built but version check failed"; exit 1; }
if [[ "${AI4DL_BUILD_CLEAN:-0}" == 1 ]]; then  # e.g. CI caching only $BIN
  log "AI4DL_BUILD_CLEAN=1: removing $GOMODCACHE, $GOCACHE and $CACHE/src"
  rm -rf "$GOMODCACHE" "$GOCACHE" "$CACHE/src"
fi
log "all done in $((SECONDS - T0)) s; binaries in $BIN:"
ls -l "$BIN" >&2

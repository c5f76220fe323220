# The Go toolchain setup shared by e2e/controlplane/build.sh and e2e/helm/build.sh (sourced),
# so both builds use one module cache and one build cache under $CACHE/go and share downloads
# and compiled packages. Needs CACHE, JOBS and a log function from the sourcing script.
#   GO                   go binary (default: `go` on PATH, else /usr/local/go/bin/go)
#   AI4DL_GOMODCACHE, AI4DL_GOCACHE   other Go caches (default: $CACHE/go/mod, $CACHE/go/build)

if [[ -z "${GO:-}" ]]; then
  if command -v go >/dev/null 2>&1; then GO="$(command -v go)"; else GO=/usr/local/go/bin/go; fi
fi

require_go() {
  if [[ ! -x "$GO" ]] && ! command -v "$GO" >/dev/null 2>&1; then
    log "ERROR: no Go toolchain found (set GO=/path/to/go)"; exit 2
  fi
}

export_go_env() {
  export GOMODCACHE="${AI4DL_GOMODCACHE:-$CACHE/go/mod}"
  export GOCACHE="${AI4DL_GOCACHE:-$CACHE/go/build}"
  # -modcacherw: module cache stays deletable with plain rm -rf; -p: few cores, bounded memory.
  export GOFLAGS="-modcacherw -p=$JOBS -buildvcs=false"
  export CGO_ENABLED=0
  export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"
  export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
  log "go: $("$GO" version); GOMODCACHE=$GOMODCACHE GOCACHE=$GOCACHE GOFLAGS=$GOFLAGS"
}

#!/usr/bin/env bash
# Build (or reuse) the helm binary used by the chart tests and deploy/helm/render.sh.
#
# helm comes from the Go module proxy (`go install`), pinned below, into the same cache as the
# Kubernetes test binaries: $KAI_KUBE_HOME/bin (default ~/.cache/kaiweb-kube/bin). A second run only
# checks the version of the binary already there. HELM: an existing helm binary of the pinned
# version is used as it is.
# Prints, as its last line, the path of the helm binary.
set -euo pipefail
HELM_VERSION="v3.22.0"
if [ -n "${HELM:-}" ]; then
  "$HELM" version --template '{{.Version}}' | grep -qx "$HELM_VERSION" \
    || { echo "helm: HELM=$HELM is not $HELM_VERSION" >&2; exit 1; }
  echo "$HELM"
  exit 0
fi
CACHE="${KAI_KUBE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/kaiweb-kube}"
BIN="$CACHE/bin"
mkdir -p "$BIN"
started=$(date +%s)
say() { echo "helm: [$(( $(date +%s) - started ))s] $*" >&2; }

installed_version() { "$BIN/helm" version --template '{{.Version}}' 2>/dev/null || true; }

go_tool() {  # a Go >= 1.24: the machine's (PATH, then /usr/local/go)
  local g v
  for g in "$(command -v go || true)" /usr/local/go/bin/go; do
    [ -n "$g" ] && [ -x "$g" ] || continue
    v="$("$g" env GOVERSION 2>/dev/null | sed 's/^go//')"
    if [ "$(printf '%s\n1.24\n' "$v" | sort -V | head -1)" = "1.24" ]; then echo "$g"; return; fi
  done
  echo "helm: needs Go >= 1.24 on PATH or at /usr/local/go/bin/go" >&2
  return 1
}

STAMP="$BIN/.helm-version"  # "<helm version> <build recipe>": a change of either rebuilds
RECIPE=2
if [ -x "$BIN/helm" ] && [ "$(installed_version)" = "$HELM_VERSION" ] \
   && [ "$(cat "$STAMP" 2>/dev/null)" = "$HELM_VERSION $RECIPE" ]; then
  say "reusing helm $HELM_VERSION in $BIN"
else
  GO="$(go_tool)"
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS= GOCACHE="$CACHE/gocache" GOMODCACHE="$CACHE/gomodcache"
  # Module and build caches are shared with deploy/kube/build.sh.
  say "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION with $("$GO" version | cut -d' ' -f3)"
  # As helm's own Makefile does: the Kubernetes version `helm template` and `helm lint` assume by
  # default is the one of the client-go helm is built with (otherwise v1.20).
  gomod="$(cd "$CACHE" && "$GO" mod download -json "helm.sh/helm/v3@$HELM_VERSION" \
           | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  client_go="$(sed -nE 's#^[[:space:]]*k8s\.io/client-go v0\.([0-9]+)\..*#\1#p' "$gomod" | head -1)"
  [ -n "$client_go" ] || { echo "helm: no k8s.io/client-go requirement in $gomod" >&2; exit 1; }
  flags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  flags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    flags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$client_go"
  done
  GOBIN="$BIN" "$GO" install -trimpath -ldflags "$flags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  got="$(installed_version)"
  [ "$got" = "$HELM_VERSION" ] || { echo "helm: built binary reports '$got', expected $HELM_VERSION" >&2; exit 1; }
  echo "$HELM_VERSION $RECIPE" > "$STAMP"
  say "done: helm $HELM_VERSION (default Kubernetes version v1.$client_go)"
fi
echo "$BIN/helm"

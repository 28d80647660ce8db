#!/usr/bin/env bash
# Installs what Flotilla's local clusters need: etcd (Debian's etcd-server), kubectl check,
# and kube-apiserver + kube-controller-manager + kube-scheduler v1.20.2 built from Debian
# bookworm's `kubernetes` source package (see docs/development.md). Cached outside the
# repository; a second run with the cache complete does nothing, and a cache that lacks some
# of the binaries (an older cache without kube-scheduler) gets only the missing ones built.
#
# KUBE_BIN_DIR: use the binaries from this directory instead (any Kubernetes build); it needs
# kube-apiserver and kube-controller-manager, and kube-scheduler for pods to be scheduled.
# FLOTILLA_CACHE: cache root (default ~/.cache/flotilla).
set -euo pipefail

CACHE_ROOT="${FLOTILLA_CACHE:-$HOME/.cache/flotilla}"
K8S_VERSION="v1.20.2"
OUT="$CACHE_ROOT/k8s-$K8S_VERSION"

log() { echo "[install-k8s] $*" >&2; }

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

apt_updated=0
apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ $apt_updated -eq 0 ]; then
    $SUDO apt-get update -qq >&2
    apt_updated=1
  fi
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
}

# etcd is needed in every case (also with KUBE_BIN_DIR); setpriv (util-linux) ties the
# clusters' processes to the test process.
apt_install etcd-server jq util-linux
# The tests and the demo's hints use kubectl; Debian's kubernetes-client provides one when
# the machine has none.
if ! command -v kubectl >/dev/null 2>&1; then
  apt_install kubernetes-client
fi

BINARIES=(kube-apiserver kube-controller-manager kube-scheduler)

if [ -n "${KUBE_BIN_DIR:-}" ]; then
  for b in kube-apiserver kube-controller-manager; do
    [ -x "$KUBE_BIN_DIR/$b" ] || { log "KUBE_BIN_DIR=$KUBE_BIN_DIR has no executable $b"; exit 1; }
  done
  [ -x "$KUBE_BIN_DIR/kube-scheduler" ] \
    || log "KUBE_BIN_DIR=$KUBE_BIN_DIR has no kube-scheduler: pods in the local clusters stay Pending"
  echo "$KUBE_BIN_DIR"
  exit 0
fi

MISSING=()
for b in "${BINARIES[@]}"; do
  [ -x "$OUT/$b" ] || MISSING+=("$b")
done
if [ ${#MISSING[@]} -eq 0 ]; then
  echo "$OUT"
  exit 0
fi

apt_install golang-go rsync dpkg-dev golang-github-modern-go-reflect2-dev

# Enable deb-src by deriving it from the machine's own Debian entry: no mirror host is
# written by this script, it copies whatever the machine already uses.
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    log "enabling Debian source entries (derived from debian.sources)"
    sed -e 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
      | $SUDO tee /etc/apt/sources.list.d/flotilla-debian-src.sources >/dev/null
  elif [ -f /etc/apt/sources.list ]; then
    log "enabling Debian source entries (derived from sources.list)"
    grep '^deb ' /etc/apt/sources.list | sed -e 's/^deb /deb-src /' \
      | $SUDO tee /etc/apt/sources.list.d/flotilla-debian-src.list >/dev/null
  else
    log "no Debian apt entry found to derive a source entry from"; exit 1
  fi
  $SUDO apt-get update -qq >&2
fi

BUILD="$CACHE_ROOT/build"
mkdir -p "$BUILD" "$OUT"
cd "$BUILD"
SRC=$(find . -maxdepth 1 -type d -name 'kubernetes-1.20*' | head -n1)
if [ -z "$SRC" ]; then
  log "fetching Debian's kubernetes source package"
  # bookworm ships 1.20.5+really1.20.2; pin the source version via the bookworm suite.
  apt-get source -qq kubernetes >&2
  SRC=$(find . -maxdepth 1 -type d -name 'kubernetes-1.20*' | head -n1)
fi
[ -n "$SRC" ] || { log "kubernetes source not found after apt-get source"; exit 1; }
SRC=$(cd "$SRC" && pwd)
log "source tree: $SRC"

# Required fix: vendored reflect2 v1.0.1 crashes under Go >= 1.18 (SIGSEGV in mapiterinit)
# the first time the apiserver decodes a custom resource. Replace it with Debian's 1.0.2.
R2_SRC=/usr/share/gocode/src/github.com/modern-go/reflect2
R2_DST="$SRC/vendor/github.com/modern-go/reflect2"
if [ -d "$R2_DST" ] && [ ! -f "$R2_DST/.flotilla-patched" ]; then
  log "replacing vendored reflect2 with Debian's 1.0.2"
  rm -f "$R2_DST"/*.go "$R2_DST"/*.s
  cp "$R2_SRC"/*.go "$R2_DST"/
  cp "$R2_SRC"/*.s "$R2_DST"/ 2>/dev/null || true
  rm -f "$R2_DST"/*_test.go
  touch "$R2_DST/.flotilla-patched"
fi
# vendor/modules.txt records 1.0.1; go 1.19 checks vendor consistency only against go.mod,
# which names the same module path, so no change is needed there.

mkdir -p "$SRC/.go/src/k8s.io"
ln -sfn "$SRC" "$SRC/.go/src/k8s.io/kubernetes"
WHAT=""
for b in "${MISSING[@]}"; do WHAT="$WHAT cmd/$b"; done
log "building ${MISSING[*]} (several minutes)"
(
  cd "$SRC/.go/src/k8s.io/kubernetes"
  export GOPATH="$SRC/.go" CGO_ENABLED=0 GOFLAGS=-mod=vendor GO111MODULE=on
  export KUBE_GIT_VERSION="$K8S_VERSION" KUBE_GIT_TREE_STATE=clean
  make WHAT="${WHAT# }" >&2
)
for b in "${MISSING[@]}"; do
  BIN=$(find "$SRC/_output" -type f -name "$b" -perm -u+x | head -n1)
  [ -n "$BIN" ] || { log "build produced no $b"; exit 1; }
  cp "$BIN" "$OUT/"
done
log "installed ${MISSING[*]} into $OUT"
# The source tree is large; keep only the binaries.
rm -rf "$BUILD"
echo "$OUT"

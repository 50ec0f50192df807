#!/usr/bin/env bash
# Builds the real control-plane binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler), the kubelet and kube-proxy of the test bed's real machines, CoreDNS (the
# cluster DNS of a Helm install on real machines), the CSI external-attacher (csi-attacher) and the csi-addons manager and sidecar from the Go module proxy into a
# cache outside the checkout, keyed by version, so that a fresh clone on the same machine reuses
# them. Prints the bin directory on success.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.0}"
STAGING_VERSION="${STAGING_VERSION:-v0.37.0}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.5}"
CSI_ATTACHER_VERSION="${CSI_ATTACHER_VERSION:-v4.13.0}"
CACHE_ROOT="${PALISADE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/palisade}"
K8S_BIN="$CACHE_ROOT/kubernetes-$K8S_VERSION/bin"
ETCD_BIN="$CACHE_ROOT/etcd-$ETCD_VERSION/bin"
CSI_ATTACHER_BIN="$CACHE_ROOT/csi-attacher-$CSI_ATTACHER_VERSION/bin"
CSI_ADDONS_VERSION="${CSI_ADDONS_VERSION:-v0.14.0}"
CSI_ADDONS_BIN="$CACHE_ROOT/csi-addons-$CSI_ADDONS_VERSION/bin"
COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
COREDNS_BIN="$CACHE_ROOT/coredns-$COREDNS_VERSION/bin"

log() { echo "build-testbed: $*" >&2; }

build_k8s() {
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy) missing=0
  for b in "${want[@]}"; do [ -x "$K8S_BIN/$b" ] || missing=1; done
  [ "$missing" = 1 ] || { log "kubernetes $K8S_VERSION cached in $K8S_BIN"; return; }
  local work="$CACHE_ROOT/src/kubernetes-$K8S_VERSION"
  mkdir -p "$work" "$K8S_BIN"
  log "building kubernetes $K8S_VERSION in $work (about 10 minutes on 2 cores, once)"
  cd "$work"
  cat > go.mod <<MOD
module palisade.dev/testbed/kubernetes

go 1.26

require k8s.io/kubernetes $K8S_VERSION
MOD
  # Every staging module (replaced by ./staging/src/... in k8s.io/kubernetes' own go.mod) is
  # replaced here by its tagged release.
  local modfile
  modfile="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  grep -E '=> \./staging/src/' "$modfile" | awk '{print $1}' | sort -u | while read -r m; do
    echo "replace $m => $m $STAGING_VERSION" >> go.mod
  done
  echo 'package main' > tools.go
  for b in "${want[@]}"; do
    [ -x "$K8S_BIN/$b" ] && continue
    GOFLAGS=-mod=mod go build -o "$K8S_BIN/$b.tmp" "k8s.io/kubernetes/cmd/$b"
    mv "$K8S_BIN/$b.tmp" "$K8S_BIN/$b"
    log "built $b"
  done
}

build_etcd() {
  [ -x "$ETCD_BIN/etcd" ] && { log "etcd $ETCD_VERSION cached in $ETCD_BIN"; return; }
  local work="$CACHE_ROOT/src/etcd-$ETCD_VERSION"
  mkdir -p "$work" "$ETCD_BIN"
  cd "$work"
  cat > go.mod <<MOD
module palisade.dev/testbed/etcd

go 1.26

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
  cat > main.go <<'GO'
package main

import "go.etcd.io/etcd/server/v3/etcdmain"
import "os"

func main() { etcdmain.Main(os.Args) }
GO
  GOFLAGS=-mod=mod go mod tidy >/dev/null
  GOFLAGS=-mod=mod go build -o "$ETCD_BIN/etcd.tmp" .
  mv "$ETCD_BIN/etcd.tmp" "$ETCD_BIN/etcd"
  log "built etcd"
}

build_csi_attacher() {
  [ -x "$CSI_ATTACHER_BIN/csi-attacher" ] && { log "csi-attacher $CSI_ATTACHER_VERSION cached in $CSI_ATTACHER_BIN"; return; }
  local mod=github.com/kubernetes-csi/external-attacher/v4
  local work="$CACHE_ROOT/src/csi-attacher-$CSI_ATTACHER_VERSION"
  mkdir -p "$work" "$CSI_ATTACHER_BIN"
  log "building csi-attacher $CSI_ATTACHER_VERSION in $work (a few minutes on 2 cores, once)"
  cd "$work"
  cat > go.mod <<MOD
module palisade.dev/testbed/csi-attacher

go 1.26

require $mod $CSI_ATTACHER_VERSION
MOD
  # external-attacher's own go.mod pins k8s.io/* with replace directives, which only apply in
  # its own module: copy them (single-line and block forms) into the wrapper.
  local modfile
  modfile="$(go mod download -json "$mod@$CSI_ATTACHER_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  awk '/^replace \(/ {block=1; next} block && /^\)/ {block=0; next}
       block && /=>/ {print "replace " $0; next} /^replace .*=>/ {print}' "$modfile" >> go.mod
  echo 'package main' > tools.go
  GOFLAGS=-mod=mod go build -ldflags "-X main.version=$CSI_ATTACHER_VERSION" \
    -o "$CSI_ATTACHER_BIN/csi-attacher.tmp" "$mod/cmd/csi-attacher"
  mv "$CSI_ATTACHER_BIN/csi-attacher.tmp" "$CSI_ATTACHER_BIN/csi-attacher"
  log "built csi-attacher"
}

# build_csi_addons builds the csi-addons manager (the NetworkFence controller) and its sidecar,
# which the manager calls and which calls the CSI driver's CSI-Addons service.
build_csi_addons() {
  [ -x "$CSI_ADDONS_BIN/csi-addons-manager" ] && [ -x "$CSI_ADDONS_BIN/csi-addons-sidecar" ] &&
    { log "csi-addons $CSI_ADDONS_VERSION cached in $CSI_ADDONS_BIN"; return; }
  local mod=github.com/csi-addons/kubernetes-csi-addons
  local work="$CACHE_ROOT/src/csi-addons-$CSI_ADDONS_VERSION"
  mkdir -p "$work" "$CSI_ADDONS_BIN"
  log "building csi-addons $CSI_ADDONS_VERSION in $work (a few minutes on 2 cores, once)"
  cd "$work"
  cat > go.mod <<MOD
module palisade.dev/testbed/csi-addons

go 1.26

require $mod $CSI_ADDONS_VERSION
MOD
  echo 'package main' > tools.go
  local ld="-X $mod/internal/version.Version=$CSI_ADDONS_VERSION"
  GOFLAGS=-mod=mod go build -ldflags "$ld" -o "$CSI_ADDONS_BIN/csi-addons-manager.tmp" "$mod/cmd/manager"
  mv "$CSI_ADDONS_BIN/csi-addons-manager.tmp" "$CSI_ADDONS_BIN/csi-addons-manager"
  GOFLAGS=-mod=mod go build -ldflags "$ld" -o "$CSI_ADDONS_BIN/csi-addons-sidecar.tmp" "$mod/sidecar"
  mv "$CSI_ADDONS_BIN/csi-addons-sidecar.tmp" "$CSI_ADDONS_BIN/csi-addons-sidecar"
  log "built csi-addons-manager and csi-addons-sidecar"
}

# build_coredns builds CoreDNS with the plugins a cluster DNS needs here (bind, errors, log,
# kubernetes), the way CoreDNS documents building with a chosen plugin set: a main package that
# imports them and sets dnsserver.Directives in their standard order.
build_coredns() {
  [ -x "$COREDNS_BIN/coredns" ] && { log "coredns $COREDNS_VERSION cached in $COREDNS_BIN"; return; }
  local work="$CACHE_ROOT/src/coredns-$COREDNS_VERSION"
  mkdir -p "$work" "$COREDNS_BIN"
  log "building coredns $COREDNS_VERSION in $work (about 2 minutes on 2 cores, once)"
  cd "$work"
  cat > go.mod <<MOD
module palisade.dev/testbed/coredns

go 1.26

require github.com/coredns/coredns $COREDNS_VERSION
MOD
  cat > main.go <<'GO'
// CoreDNS with the plugins the test bed's cluster DNS needs.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
)

func init() { dnsserver.Directives = []string{"bind", "errors", "log", "kubernetes"} }

func main() { coremain.Run() }
GO
  GOFLAGS=-mod=mod go mod tidy >/dev/null
  GOFLAGS=-mod=mod go build -o "$COREDNS_BIN/coredns.tmp" .
  mv "$COREDNS_BIN/coredns.tmp" "$COREDNS_BIN/coredns"
  log "built coredns"
}

build_etcd
build_k8s
build_coredns
build_csi_attacher
build_csi_addons
# One directory with every binary, the layout envtest and the test bed expect.
BIN="$CACHE_ROOT/testbed-kubernetes-$K8S_VERSION-etcd-$ETCD_VERSION/bin"
mkdir -p "$BIN"
for b in "$K8S_BIN"/* "$ETCD_BIN"/etcd "$CSI_ATTACHER_BIN"/csi-attacher "$CSI_ADDONS_BIN"/* "$COREDNS_BIN"/coredns; do ln -sf "$b" "$BIN/$(basename "$b")"; done
echo "$BIN"

#!/usr/bin/env bash
# Build the local-cluster binaries from the Go module proxy at the versions pinned in
# hack/cluster-tools/versions.env: kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kubelet (k8s.io/kubernetes through a generated wrapper module that
# replaces every staging module k8s.io/<name> with v0.X.Y), etcd (wrapper main around
# etcdmain), helm and kubeconform; and Kueue's manager (sigs.k8s.io/kueue/cmd/kueue) with
# the CRDs, webhook configurations and RBAC of the same module version.
#
# Output: $TUNEOP_CACHE/bin/<key>/ (default ~/.cache/tuneop/bin/<key>), where <key> is
# "<kubernetes version>-<sha256 of versions.env without the KUEUE lines, 10 hex>", and
# $TUNEOP_CACHE/bin/kueue-<kueue version>-<sha256 of the KUEUE lines, 10 hex>/. Each
# directory appears atomically (built in a temp dir, then renamed), so its existence
# means "complete". Prints the Kubernetes directory as the last line of stdout. Warm
# call: instant.
#
# `build.sh kwok` builds only kwok (sigs.k8s.io/kwok/cmd/kwok: nodes and pods simulated by
# one process that writes only their status through the API server) at KWOK_VERSION, with
# kwok's own Stage files of that version, into $TUNEOP_CACHE/bin/kwok-<version>-<sha256 of
# the KWOK lines, 10 hex>/, and prints that directory. Only the scale benchmark needs it
# (`make bench-operator-scale`), so the default build leaves it out; cold: about 2 min.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
source "$here/versions.env"
cache=${TUNEOP_CACHE:-$HOME/.cache/tuneop}
# Lines naming KUEUE or KWOK are left out of the Kubernetes key (each has a cache dir of its
# own), so a bump of either rebuilds only that.
key="${KUBERNETES_VERSION}-$(grep -v -e KUEUE -e KWOK "$here/versions.env" | sha256sum | cut -c1-10)"
out="$cache/bin/$key"
kueue_key="kueue-${KUEUE_VERSION}-$(grep KUEUE "$here/versions.env" | sha256sum | cut -c1-10)"
kueue_out="$cache/bin/$kueue_key"
k8s_done() { [[ -x "$out/kube-apiserver" && -x "$out/etcd" && -x "$out/kubectl" && -x "$out/kubelet" ]]; }
kueue_done() { [[ -x "$kueue_out/kueue" && -f "$kueue_out/webhooks.yaml" ]]; }
kwok_key="kwok-${KWOK_VERSION}-$(grep KWOK "$here/versions.env" | sha256sum | cut -c1-10)"
kwok_out="$cache/bin/$kwok_key"
kwok_done() { [[ -x "$kwok_out/kwok" && -d "$kwok_out/stages" ]]; }
only=${1:-}
if [[ $only == kwok ]] && kwok_done; then
  echo "$kwok_out"
  exit 0
fi
if [[ -z $only ]] && k8s_done && kueue_done; then
  echo "$out"
  exit 0
fi

command -v go >/dev/null || { echo "cluster-tools: go not found on PATH" >&2; exit 1; }
log() { echo "cluster-tools: $*" >&2; }

export GOFLAGS="-mod=mod -trimpath"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
# sum.golang.org is not reachable from this machine; the module proxy (over TLS) is
# the source of truth and each wrapper's go.sum records what it served.
export GOSUMDB=${GOSUMDB_OVERRIDE:-off}
export GOPROXY=${GOPROXY:-https://proxy.golang.org}
proxy=${GOPROXY%%,*}
par=${CLUSTER_TOOLS_PARALLELISM:-2}

mkdir -p "$cache/bin"
start=$SECONDS

# Run "$@" (a build step) with a line a minute on stderr, so a cold build never looks hung.
ticking() {
  local what=$1 rc=0
  shift
  (while sleep 60; do log "still building $what ($((SECONDS - start))s so far; a cold build takes 10-20 min)"; done) &
  local ticker=$!
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  return "$rc"
}
in_dir() { local dir=$1; shift; (cd "$dir" && "$@"); }

build_kubernetes() {
  tmp=$(mktemp -d "$cache/bin/.build-$key.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/bin" "$tmp/k8s" "$tmp/etcd"

  # --- k8s.io/kubernetes: wrapper module -------------------------------------------------
  kv=$KUBERNETES_VERSION
  stv="v0.${kv#v1.}"  # v1.35.4 -> v0.35.4
  curl -fsSL "$proxy/k8s.io/kubernetes/@v/$kv.mod" -o "$tmp/k8s/upstream.mod"
  staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*#\1#p' "$tmp/k8s/upstream.mod")
  [[ -n "$staging" ]] || { log "no staging replaces found in k8s.io/kubernetes@$kv go.mod"; exit 1; }
  gover=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$tmp/k8s/upstream.mod")
  godebug=$(sed -n 's/^godebug \(.*\)$/godebug \1/p' "$tmp/k8s/upstream.mod")
  {
    echo "module tuneop.local/k8s-wrapper"
    echo
    echo "go $gover"
    [[ -n "$godebug" ]] && echo "$godebug"
    echo
    echo "require k8s.io/kubernetes $kv"
    echo
    echo "replace ("
    for m in $staging; do echo "	$m => $m $stv"; done
    echo ")"
  } >"$tmp/k8s/go.mod"
  log "k8s.io/kubernetes $kv with $(wc -w <<<"$staging") staging modules at $stv"

  major=${kv#v}; major=${major%%.*}
  minor=${kv#v*.}; minor=${minor%%.*}
  date_=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  kldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kldflags+=" -X $pkg.gitVersion=$kv -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    kldflags+=" -X $pkg.gitCommit=module-proxy-$kv -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date_"
  done
  # kubelet: the local cluster's nodes run the real one, over containerd and runc.
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do
    log "building $cmd ($((SECONDS - start))s)"
    ticking "$cmd" in_dir "$tmp/k8s" go build -p "$par" -ldflags="$kldflags" -o "$tmp/bin/$cmd" "k8s.io/kubernetes/cmd/$cmd"
  done

  # --- etcd: wrapper main around etcdmain ---------------------------------------------------
  cp "$here/etcd_main.go" "$tmp/etcd/main.go"
  printf 'module tuneop.local/etcd-wrapper\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
    "$ETCD_VERSION" >"$tmp/etcd/go.mod"
  log "building etcd $ETCD_VERSION ($((SECONDS - start))s)"
  in_dir "$tmp/etcd" go mod tidy
  ticking etcd in_dir "$tmp/etcd" go build -p "$par" \
    -ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-proxy-$ETCD_VERSION" \
    -o "$tmp/bin/etcd" .

  # --- helm and kubeconform: straight from their own modules --------------------------------
  log "building helm $HELM_VERSION ($((SECONDS - start))s)"
  GOFLAGS="-trimpath" GOBIN="$tmp/bin" ticking helm go install -p "$par" \
    -ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  log "building kubeconform $KUBECONFORM_VERSION ($((SECONDS - start))s)"
  GOFLAGS="-trimpath" GOBIN="$tmp/bin" ticking kubeconform go install -p "$par" \
    -ldflags="-s -w -X main.version=$KUBECONFORM_VERSION" \
    "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"

  cp "$here/versions.env" "$tmp/bin/versions.env"
  "$tmp/bin/kubectl" version --client >&2
  mv -T "$tmp/bin" "$out" 2>/dev/null || [[ -x "$out/kube-apiserver" ]]  # lost a race: fine
  log "done in $((SECONDS - start))s: $out ($(du -sh "$out" | cut -f1))"
  rm -rf "$tmp"
  trap - EXIT
}

# --- Kueue: the manager straight from its module (its go.mod pins k8s.io/* v0.35.x, no
# replaces), plus the CRDs, webhook configurations and RBAC of the same module version. ---
build_kueue() {
  ktmp=$(mktemp -d "$cache/bin/.build-$kueue_key.XXXXXX")
  trap 'rm -rf "$ktmp"' EXIT
  kstart=$SECONDS
  log "building kueue $KUEUE_VERSION"
  local v=sigs.k8s.io/kueue/pkg/version
  GOBIN="$ktmp" ticking kueue go install -p "$par" \
    -ldflags="-s -w -X $v.GitVersion=$KUEUE_VERSION -X $v.GitCommit=module-proxy-$KUEUE_VERSION -X $v.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  moddir=$(cd "$ktmp" && go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -d "$moddir/config/components" ]] || { log "kueue module dir not found ($moddir)"; exit 1; }
  mkdir -p "$ktmp/crds"
  cp "$moddir"/config/components/crd/bases/*.yaml "$ktmp/crds/"
  cp "$moddir/config/components/webhook/manifests.yaml" "$ktmp/webhooks.yaml"
  cp "$moddir/config/components/webhook/kustomization.yaml" "$ktmp/webhooks-kustomization.yaml"
  cp "$moddir/config/components/rbac/role.yaml" "$ktmp/rbac-manager-role.yaml"
  cp "$moddir/config/components/rbac/metrics_auth_role.yaml" "$ktmp/rbac-metrics-auth-role.yaml"
  cp "$moddir/config/components/rbac/manager_secrets_role.yaml" "$ktmp/rbac-manager-secrets-role.yaml"
  cp "$moddir/config/components/manager/controller_manager_config.yaml" "$ktmp/upstream-config.yaml"
  chmod -R u+w "$ktmp" && chmod 755 "$ktmp"  # module cache files are read-only
  grep KUEUE "$here/versions.env" >"$ktmp/versions.env"
  mv -T "$ktmp" "$kueue_out" 2>/dev/null || [[ -x "$kueue_out/kueue" ]]  # lost a race: fine
  log "kueue done in $((SECONDS - kstart))s: $kueue_out ($(du -sh "$kueue_out" | cut -f1))"
  rm -rf "$ktmp"
  trap - EXIT
}

# --- kwok: straight from its module, with its Stage files of the same version; at the
# lowest CPU priority (it is built beside whatever else the machine runs). ---
build_kwok() {
  wtmp=$(mktemp -d "$cache/bin/.build-$kwok_key.XXXXXX")
  trap 'rm -rf "$wtmp"' EXIT
  local wstart=$SECONDS
  log "building kwok $KWOK_VERSION"
  GOBIN="$wtmp" ticking kwok nice -n 19 go install -p "$par" -ldflags="-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  moddir=$(cd "$wtmp" && go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -d "$moddir/kustomize/stage" ]] || { log "kwok module dir not found ($moddir)"; exit 1; }
  mkdir -p "$wtmp/stages"
  for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease pod/fast/pod-ready; do
    cp "$moddir/kustomize/stage/$stage.yaml" "$wtmp/stages/"
  done
  grep KWOK "$here/versions.env" >"$wtmp/versions.env"
  chmod -R u+w "$wtmp" && chmod 755 "$wtmp"  # module cache files are read-only
  mv -T "$wtmp" "$kwok_out" 2>/dev/null || [[ -x "$kwok_out/kwok" ]]  # lost a race: fine
  log "kwok done in $((SECONDS - wstart))s: $kwok_out ($(du -sh "$kwok_out" | cut -f1))"
  rm -rf "$wtmp"
  trap - EXIT
}

if [[ $only == kwok ]]; then
  build_kwok
  echo "$kwok_out"
  exit 0
fi
k8s_done || build_kubernetes
kueue_done || build_kueue
echo "$out"

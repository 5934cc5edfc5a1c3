#!/usr/bin/env bash
# Build kwok (sigs.k8s.io/kwok/cmd/kwok: nodes and pods simulated by one process that writes
# only their status through the API server) from the Go module proxy at KWOK_VERSION in
# versions.env, into $TUNEOP_CACHE/bin/kwok-<version>-<sha256 of the KWOK lines, 10 hex>/.
# The directory appears atomically, so its existence means "complete". Prints it as the last
# line of stdout. Only the scale benchmark needs it, so `make cluster-tools` does not build it.
# The build runs at the lowest CPU priority: it shares the machine with whatever else runs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
source "$here/versions.env"
cache=${TUNEOP_CACHE:-$HOME/.cache/tuneop}
key="kwok-${KWOK_VERSION}-$(grep KWOK "$here/versions.env" | sha256sum | cut -c1-10)"
out="$cache/bin/$key"
if [[ -x "$out/kwok" && -d "$out/stages" ]]; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || { echo "kwok: go not found on PATH" >&2; exit 1; }
export GOFLAGS="-trimpath"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
# sum.golang.org is not reachable from this machine (see build.sh).
export GOSUMDB=${GOSUMDB_OVERRIDE:-off}
export GOPROXY=${GOPROXY:-https://proxy.golang.org}
mkdir -p "$cache/bin"
tmp=$(mktemp -d "$cache/bin/.build-$key.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
echo "kwok: building $KWOK_VERSION (cold: a few minutes)" >&2
GOBIN="$tmp" nice -n 19 go install -p "${CLUSTER_TOOLS_PARALLELISM:-2}" \
  -ldflags="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
  "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
# kwok's own stages of the same module version (what it does to nodes and pods), so the
# benchmark uses the upstream ones beside the few it defines itself.
moddir=$(cd "$tmp" && go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -d "$moddir/kustomize/stage" ]] || { echo "kwok: module dir not found ($moddir)" >&2; exit 1; }
mkdir -p "$tmp/stages"
for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease pod/fast/pod-ready; do
  cp "$moddir/kustomize/stage/$stage.yaml" "$tmp/stages/"
done
grep KWOK "$here/versions.env" >"$tmp/versions.env"
chmod -R u+w "$tmp" && chmod 755 "$tmp"  # module cache files are read-only; mktemp's dir is 700
rm -rf "$out"  # an older layout of the same key (no stages/)
mv -T "$tmp" "$out" 2>/dev/null || [[ -x "$out/kwok" ]]  # lost a race: fine
echo "kwok: done in $((SECONDS - start))s: $out ($(du -sh "$out" | cut -f1))" >&2
trap - EXIT
echo "$out"

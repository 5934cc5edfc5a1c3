#!/usr/bin/env bash
# Build (once) hack/dashboard-check, the dashboard schema check, into the cache and print
# the binary's path: $TUNEOP_CACHE/bin/dashboard-check-<hash of its go.mod, go.sum and
# main.go>. The module comes from the Go module proxy at the version go.sum pins.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TUNEOP_CACHE:-$HOME/.cache/tuneop}
hash=$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-12)
bin="$cache/bin/dashboard-check-$hash"
if [[ ! -x $bin ]]; then
  mkdir -p "$cache/bin"
  (cd "$here" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go build -trimpath -o "$bin.tmp" .) >&2
  mv "$bin.tmp" "$bin"
fi
echo "$bin"

#!/usr/bin/env bash
# Make promtool and prometheus (Debian's `prometheus` package) available for the alert
# tests. Installs only when promtool is missing; needs root and apt (CI runs as root).
# Prints the directory holding promtool as the last line of stdout.
set -euo pipefail

if ! command -v promtool >/dev/null 2>&1; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "prometheus.sh: promtool not found and not root; install Debian's prometheus package" >&2
    exit 1
  fi
  echo "prometheus.sh: installing Debian's prometheus package (promtool)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends prometheus >&2
  # The package starts a system prometheus service where an init system runs it; the
  # tests start their own on a free loopback port and need none.
fi
dirname "$(command -v promtool)"

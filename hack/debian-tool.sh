#!/usr/bin/env bash
# Usage: hack/debian-tool.sh COMMAND PACKAGE
# Make COMMAND available, installing Debian's PACKAGE when it is missing (needs root and
# apt, as CI runs). Prints the directory holding COMMAND as the last line of stdout.
set -euo pipefail

cmd=$1 pkg=$2
if ! command -v "$cmd" >/dev/null 2>&1; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "debian-tool.sh: $cmd not found and not root; install Debian's $pkg package" >&2
    exit 1
  fi
  echo "debian-tool.sh: installing Debian's $pkg package ($cmd)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "$pkg" >&2
  # Packages that ship a service start it where an init system runs them; the tests
  # start their own on free loopback ports and need none.
fi
dirname "$(command -v "$cmd")"

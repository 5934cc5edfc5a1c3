#!/usr/bin/env bash
# Make promtool and prometheus (Debian's `prometheus` package) available for the alert
# tests. Prints the directory holding promtool as the last line of stdout.
exec "$(dirname "${BASH_SOURCE[0]}")/debian-tool.sh" promtool prometheus

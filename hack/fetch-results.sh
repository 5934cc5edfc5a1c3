#!/usr/bin/env bash
# The `tuneop` client's fetch-results script (client/tuneop_client/scripts/), from a checkout.
exec "$(dirname "${BASH_SOURCE[0]}")/../client/tuneop_client/scripts/fetch-results.sh" "$@"

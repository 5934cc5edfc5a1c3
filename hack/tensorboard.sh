#!/usr/bin/env bash
# The `tuneop` client's tensorboard script (client/tuneop_client/scripts/), from a checkout.
exec "$(dirname "${BASH_SOURCE[0]}")/../client/tuneop_client/scripts/tensorboard.sh" "$@"

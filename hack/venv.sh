#!/usr/bin/env bash
# Create (once) the development virtualenv for a given lock file, outside the repo, so a
# fresh clone reuses it: ~/.cache/tuneop/venv-<hash of the lock>. A marker file written
# last says the install finished; an interrupted install is wiped and redone.
# Prints the venv path. The repo's own packages are not installed into it: the Makefile
# puts contract/, operator/ and trainer_image/ on PYTHONPATH, so any clone works with it.
set -euo pipefail
lock=${1:?usage: hack/venv.sh requirements/dev.lock}
cache=${TUNEOP_CACHE:-$HOME/.cache/tuneop}
hash=$(sha256sum "$lock" | cut -c1-12)
venv="$cache/venv-$hash"
if [ -f "$venv/.tuneop-complete" ]; then echo "$venv"; exit 0; fi
rm -rf "$venv"
mkdir -p "$cache"
python3 -m venv "$venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$lock" >&2
touch "$venv/.tuneop-complete"
echo "$venv"

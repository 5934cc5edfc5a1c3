"""Seeds derived from names, so a resumed process draws what an uninterrupted one did."""

from __future__ import annotations

import hashlib


def derive(text: str) -> int:
    """A 32-bit seed that is a pure function of `text` (e.g. "<seed>/<trial>/<n>")."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")

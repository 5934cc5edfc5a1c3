"""The Events the operator posts about a TuningJob (core/v1 Event: type, reason,
message), as a decision names them and the API client posts them."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str

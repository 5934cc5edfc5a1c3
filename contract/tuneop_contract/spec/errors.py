"""The one error a TuningJob spec check reports, on either side of the contract."""

from __future__ import annotations


class SpecError(Exception):
    """A spec problem: `field` (its path, e.g. `spec.env[2].name`) and `message` (what is
    wrong and what is allowed). str() is the one line `field: message` that the trainer
    prints before exiting 2 and the operator puts in condition Failed/InvalidSpec."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __eq__(self, other: object) -> bool:
        # by value: a spec parsed twice compares equal, its errors included
        if not isinstance(other, SpecError):
            return NotImplemented
        return (self.field, self.message) == (other.field, other.message)

    def __hash__(self) -> int:
        return hash((self.field, self.message))

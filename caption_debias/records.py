"""What readers yield: a Record to process, or a Reject with its reason."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Union

EXCERPT_CHARS = 200


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """A short, printable excerpt of a raw record for rejects.jsonl."""
    if isinstance(value, bytes):
        text = value.decode("utf-8", errors="replace")
    elif isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(slots=True)
class Record:
    """One image-caption pair as read from an input, before the text pipeline."""

    source: str  # reader name, e.g. "sharegpt4v"
    input: str  # input path as given
    location: Union[int, str]  # record index, line number or byte offset
    source_id: str | None  # id from the input; None -> key derived from input + location
    image: str
    caption: str
    split: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Reject:
    """A record that cannot be used, with why. `fatal` marks an input cut off mid-way."""

    input: str
    location: Union[int, str]
    reason: str
    record: str = ""
    fatal: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"input": self.input, "location": self.location, "reason": self.reason, "record": self.record}

"""ShareGPT4V: one JSON array, streamed element by element (the 1.49 GB file never loads whole)."""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Any, Iterator

from caption_debias.readers.common import caption_problem
from caption_debias.records import Record, Reject, excerpt

NAME = "sharegpt4v"
READ_BYTES = 1 << 20
MAX_ELEMENT_CHARS = 64 << 20  # a single record this large is a broken file, not a caption
_WS = " \t\r\n"


def iter_array(path: Path, read_bytes: int = READ_BYTES) -> Iterator[tuple[int, Any] | Reject]:
    """Yield (byte offset, element) for each element of a top-level JSON array, or a fatal Reject.

    Hand-written (json.JSONDecoder.raw_decode over a sliding buffer) because no streaming JSON
    library is installed; bytes that are not UTF-8 are kept as lone surrogates so one bad
    record becomes a reject instead of stopping the file, and byte offsets stay exact.
    """
    decoder = json.JSONDecoder()
    text_decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
    buf, pos, eof = "", 0, False
    mark_pos, mark_byte = 0, 0  # a character index in buf and its byte offset in the file
    name = str(path)

    def byte_at(i: int) -> int:
        """Byte offset of buf[i]; calls come in increasing i, so only the new stretch is encoded."""
        nonlocal mark_pos, mark_byte
        mark_byte += len(buf[mark_pos:i].encode("utf-8", "surrogateescape"))
        mark_pos = i
        return mark_byte

    with open(path, "rb") as fh:

        def fill() -> bool:
            nonlocal buf, eof
            if eof:
                return False
            data = fh.read(read_bytes)
            buf += text_decoder.decode(data, final=not data)
            eof = not data
            return True

        def skip_ws() -> bool:
            """Advance pos to the next non-space character; False at end of file."""
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos] in _WS:
                    pos += 1
                if pos < len(buf):
                    return True
                if not fill():
                    return False

        if not skip_ws() or buf[pos] != "[":
            yield Reject(name, 0, "not a JSON array", excerpt(buf[pos : pos + 80]), fatal=True)
            return
        pos += 1
        first = True
        while True:
            if not skip_ws():
                yield Reject(name, byte_at(pos), "truncated input: file ends inside the array", "", fatal=True)
                return
            if buf[pos] == "]":
                return
            if not first:
                if buf[pos] != ",":
                    yield Reject(
                        name, byte_at(pos), "broken JSON: expected ',' or ']'", excerpt(buf[pos : pos + 80]), fatal=True
                    )
                    return
                pos += 1
                if not skip_ws():
                    yield Reject(name, byte_at(pos), "truncated input: file ends inside the array", "", fatal=True)
                    return
            first = False
            while True:
                try:
                    value, end = decoder.raw_decode(buf, pos)
                    if end < len(buf) or eof:  # a bare number at the buffer's end may go on
                        break
                    fill()
                except json.JSONDecodeError as exc:
                    # More bytes can only help when the parser ran off the end of the buffer
                    # (or inside a string); a syntax error before that is final, so a broken
                    # element never makes the buffer swallow the rest of a huge file.
                    # (16 characters of slack: a literal or number cut at the end, e.g. `tr`, `-1.5e`)
                    wants_more = exc.pos >= len(buf) - 16 or exc.msg.startswith("Unterminated string")
                    if wants_more and len(buf) - pos > MAX_ELEMENT_CHARS:
                        wants_more = False
                    if not wants_more:
                        yield Reject(
                            name,
                            byte_at(pos),
                            f"truncated input: broken JSON inside the array ({exc.msg})",
                            excerpt(buf[pos : pos + 200]),
                            fatal=True,
                        )
                        return
                    if not fill():  # no more bytes: the element is cut off
                        yield Reject(
                            name,
                            byte_at(pos),
                            "truncated input: element cut off",
                            excerpt(buf[pos : pos + 200]),
                            fatal=True,
                        )
                        return
            yield byte_at(pos), value
            pos = end
            if pos > read_bytes:  # drop consumed text so the buffer stays about one read long
                byte_at(pos)
                buf, pos, mark_pos = buf[pos:], 0, 0


def first_gpt_turn(element: dict) -> tuple[Any, str | None]:
    conversations = element.get("conversations")
    if not isinstance(conversations, list):
        return None, "missing field: conversations"
    for turn in conversations:
        if isinstance(turn, dict) and turn.get("from") == "gpt":
            return turn.get("value"), None
    return None, "no gpt turn"


def read(path: Path, name: str, options) -> Iterator[Record | Reject]:
    for item in iter_array(path):
        if isinstance(item, Reject):
            item.input = name
            yield item
            return
        offset, element = item
        if not isinstance(element, dict):
            yield Reject(name, offset, "not an object", excerpt(element))
            continue
        caption, problem = first_gpt_turn(element)
        problem = problem or caption_problem(caption)
        if problem is None and "image" not in element:
            problem = "missing field: image"
        if problem:
            yield Reject(name, offset, problem, excerpt(element))
            continue
        source_id = element.get("id")
        meta = {k: v for k, v in element.items() if k not in ("id", "image", "conversations")}
        yield Record(
            source=NAME,
            input=name,
            location=offset,
            source_id=None if source_id is None else str(source_id),
            image=element["image"],
            caption=caption,
            split=options.split,
            meta=meta,
        )

"""ShareGPT4V: one JSON array, streamed element by element (the 1.49 GB file never loads whole).

A broken element costs one record: it becomes a Reject with its byte offset and reading goes
on at the next element. Only a file that ends before its closing ']' is cut off (fatal).
"""

from __future__ import annotations

import codecs
import json
import re
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from caption_debias import storage
from caption_debias.readers.common import caption_problem, id_problem
from caption_debias.records import Record, Reject, excerpt

NAME = "sharegpt4v"
READ_BYTES = 1 << 20
MAX_ELEMENT_CHARS = 64 << 20  # a single record this large is a broken file, not a caption
RESYNC_SCAN_CHARS = 1 << 20  # how far past a broken element's start its end is looked for by bracket count
_WS = " \t\r\n"
_BOM = "\ufeff"  # a UTF-8 byte-order mark decodes to this one character (3 bytes, as byte_at counts it)
_VALUE_START = frozenset('{["-0123456789tfn')
_OUTSIDE_STRING = re.compile(r'["{}\[\],]')
_INSIDE_STRING = re.compile(r'["\\]')
_STRAY_END = re.compile(r"[,\]{\[]")
_FIRST_KEY = re.compile(r'\{[ \t\r\n]*("(?:[^"\\\x00-\x1f]|\\.){0,200}")[ \t\r\n]*:')
_ANY_START = re.compile(r",[ \t\r\n]*[{\[]")
_LONG_DIGITS = re.compile(r"\d{640,}")  # 640: the least limit sys.set_int_max_str_digits() takes


class _Window:
    """A sliding window of decoded text over the file: `buf` from some point on, `pos` the cursor.

    Bytes that are not UTF-8 are kept as lone surrogates, so one bad record becomes a reject
    instead of stopping the file, and byte offsets stay exact.
    """

    def __init__(self, fh: BinaryIO, read_bytes: int) -> None:
        self.fh, self.read_bytes = fh, read_bytes
        self.text_decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self.json_decoder = json.JSONDecoder()
        self.buf, self.eof = "", False
        self.pos: int | None = 0  # None once nothing follows a broken element (_broken)
        self.mark_pos, self.mark_byte = 0, 0  # a character index in buf and its byte offset in the file

    def fill(self) -> bool:
        if self.eof:
            return False
        data = self.fh.read(self.read_bytes)
        self.buf += self.text_decoder.decode(data, final=not data)
        self.eof = not data
        return True

    def byte_at(self, i: int) -> int:
        """Byte offset of buf[i]; calls come in increasing i, so only the new stretch is encoded."""
        self.mark_byte += len(self.buf[self.mark_pos : i].encode("utf-8", "surrogateescape"))
        self.mark_pos = i
        return self.mark_byte

    def drop_before(self, i: int) -> None:
        """Forget buf[:i] (indices shift down by i) so the buffer stays about one read long."""
        self.byte_at(i)
        assert self.pos is not None  # only while elements follow
        self.buf, self.pos, self.mark_pos = self.buf[i:], self.pos - i, 0

    def next_char(self, i: int) -> int | None:
        """Index of the first non-space character at or after i (reading on), None at end of file."""
        while True:
            while i < len(self.buf) and self.buf[i] in _WS:
                i += 1
            if i < len(self.buf):
                return i
            if not self.fill():
                return None

    def decode(self, i: int) -> tuple[Any, int]:
        """The JSON value at buf[i] and its end, reading on while the parser runs off the buffer's end."""
        while True:
            try:
                value, end = self.json_decoder.raw_decode(self.buf, i)
                if end < len(self.buf) or self.eof:  # a bare number at the buffer's end may go on
                    return value, end
                self.fill()
            except json.JSONDecodeError as exc:
                # More bytes can only help when the parser ran off the end of the buffer (or
                # inside a string); a syntax error before that is final, so a broken element
                # never makes the buffer swallow the rest of a huge file.
                # (16 characters of slack: a literal or number cut at the end, e.g. `tr`, `-1.5e`)
                wants_more = exc.pos >= len(self.buf) - 16 or exc.msg.startswith("Unterminated string")
                if not wants_more or len(self.buf) - i > MAX_ELEMENT_CHARS or not self.fill():
                    raise
            except ValueError as exc:  # an integer past sys.get_int_max_str_digits(): a broken element too
                digits = _LONG_DIGITS.search(self.buf, i)
                raise json.JSONDecodeError(
                    str(exc).partition(":")[0], self.buf, digits.start() if digits else i
                ) from None


class _Resync:
    """Where the element after a broken one starts.

    First by counting brackets outside strings from the broken element's start (exact when its
    quotes and brackets balance: a syntax error, a raw tab, newline or NUL, a bad escape), and
    only if the next element then looks like one; else by searching for the next ', {"KEY":'
    whose KEY is the first key of the array's elements (an unbalanced quote or bracket).
    """

    def __init__(self, window: _Window) -> None:
        self.w = window
        self.element_start: re.Pattern | None = None  # '{"id":' of this array's elements, once seen
        self.next_element = _ANY_START
        self.element_or_comma = _STRAY_END  # after stray text: a ',' or the element itself
        self.open_at_eof = False  # the bracket count reached the end of file inside a structure

    def learn(self, i: int) -> None:
        """Remember how the array's elements open (their first key), from the element at buf[i]."""
        m = _FIRST_KEY.match(self.w.buf, i)
        if m:
            key = r"\{[ \t\r\n]*" + re.escape(m.group(1)) + r"[ \t\r\n]*:"
            self.element_start = re.compile(key)
            self.next_element = re.compile(r",[ \t\r\n]*" + key)
            self.element_or_comma = re.compile(r"(?:,[ \t\r\n]*)?" + key)

    def bracket_end(self, start: int) -> int | None:
        """Index of the ',' or ']' ending the element at `start` when brackets balance; None if not found."""
        w, depth, in_string, i = self.w, 0, False, start
        self.open_at_eof = False
        while True:
            m = (_INSIDE_STRING if in_string else _OUTSIDE_STRING).search(w.buf, i)
            if m is None or (in_string and m.group() == "\\" and m.end() >= len(w.buf)):
                if m is None:
                    i = len(w.buf)
                if len(w.buf) - start > RESYNC_SCAN_CHARS or not w.fill():
                    self.open_at_eof = w.eof and depth > 0 and not in_string
                    return None
                continue
            c, i = m.group(), m.end()
            if in_string:
                if c == "\\":
                    i += 1
                else:
                    in_string = False
            elif c == '"':
                in_string = True
            elif c in "{[":
                depth += 1
            elif depth <= 0 and c in ",]":
                return m.start()
            elif c != ",":  # a closing bracket
                depth -= 1

    def plausible_end(self, e: int) -> bool:
        """Does the text after buf[e] (a ',' or ']') continue the array as it should?"""
        w = self.w
        n = w.next_char(e + 1)
        if w.buf[e] == "]":
            return n is None  # the array's end: nothing but space may follow
        if n is None:
            return True  # a ',' at the end of file: reported as cut off by the main loop
        while len(w.buf) - n < 256 and w.fill():
            pass
        if self.element_start is not None and self.element_start.match(w.buf, n):
            return True
        if w.buf[n] not in _VALUE_START:
            return False
        try:
            _, end = w.decode(n)
        except json.JSONDecodeError:
            return False
        after = w.next_char(end)
        return after is None or w.buf[after] in ",]"

    def search(self, start: int, stray: bool = False) -> int | None:
        """Index of the ',' before the next element that opens like the others, or None at end of file.

        After stray text (`stray`) the element itself may come without its ',': then its index.
        """
        w, i = self.w, start
        pattern = self.element_or_comma if stray else self.next_element
        while True:
            m = pattern.search(w.buf, i)
            if m is not None:
                return m.start()
            keep = max(i, len(w.buf) - 4096)  # an overlap for a match cut by the buffer's end
            w.drop_before(keep)
            i = 0
            if not w.fill():
                return None


def iter_array(path: Path, read_bytes: int = READ_BYTES) -> Iterator[tuple[int, Any] | Reject]:
    """Yield (byte offset, element) for each element of a top-level JSON array, or a Reject.

    A broken element (a syntax error, a raw control character in a string, stray text between
    elements) is one Reject at its byte offset and the next element is read; a fatal Reject
    means the file ends before the array does.
    Hand-written (json.JSONDecoder.raw_decode over a sliding buffer): ijson and json-stream stop
    at the first syntax error and give no byte offsets (docs/benchmarks.md, ShareGPT4V reader).
    """
    name = str(path)
    with storage.open_file(path, "rb") as fh:
        w = _Window(fh, read_bytes)
        resync = _Resync(w)
        start = w.next_char(0)
        if start is not None and w.buf[start] == _BOM:
            start = w.next_char(start + 1)
        if start is None or w.buf[start] != "[":
            head = "" if start is None else w.buf[start : start + 80]
            yield Reject(name, 0, "not a JSON array", excerpt(head), fatal=True)
            return
        w.pos = start + 1
        need_comma = False
        while True:
            pos = w.next_char(w.pos)
            if pos is None:
                yield Reject(name, w.byte_at(len(w.buf)), "truncated input: file ends inside the array", "", fatal=True)
                return
            w.pos = pos
            c = w.buf[pos]
            if c == "]":
                return
            if need_comma:
                if c != ",":
                    reject = _broken(w, resync, name, pos, None)
                    yield reject
                    if reject.fatal or w.pos is None:
                        return
                    need_comma = w.buf[w.pos] in ",]"
                    continue
                pos = w.next_char(pos + 1)
                if pos is None:
                    yield Reject(
                        name, w.byte_at(len(w.buf)), "truncated input: file ends inside the array", "", fatal=True
                    )
                    return
                w.pos = pos
                if w.buf[pos] == "]":  # a trailing comma: nothing is lost
                    return
            if resync.element_start is None and w.buf[pos] == "{":
                while len(w.buf) - pos < 256 and w.fill():
                    pass
                resync.learn(pos)
            try:
                value, end = w.decode(pos)
            except json.JSONDecodeError as exc:
                reject = _broken(w, resync, name, pos, exc)
                yield reject
                if reject.fatal or w.pos is None:
                    return
                need_comma = w.buf[w.pos] in ",]"
                if w.pos > w.read_bytes:
                    w.drop_before(w.pos)
                continue
            yield w.byte_at(pos), value
            w.pos = end
            need_comma = True
            if end > read_bytes:  # drop consumed text so the buffer stays about one read long
                w.drop_before(end)


def _broken(w: _Window, resync: _Resync, name: str, start: int, exc: json.JSONDecodeError | None) -> Reject:
    """One reject for the text at buf[start] that is no element (exc None: where a ',' belongs).

    w.pos moves to the ',' or ']' after it, or to the next element; it is None when nothing
    follows: the array ended there (non-fatal) or the file was cut off (fatal).
    """
    offset = w.byte_at(start)
    record = excerpt(w.buf[start : start + 200])
    resync.open_at_eof = False
    if exc is None or exc.pos <= start:  # not even the start of a value
        reason, end = "broken JSON: stray text between elements", resync.search(start + 1, stray=True)
    else:
        at = offset + len(w.buf[start : exc.pos].encode("utf-8", "surrogateescape"))
        reason = f"broken JSON: {exc.msg.removesuffix(' at')} at byte {at}"
        end = resync.bracket_end(start)
        if end is None or not resync.plausible_end(end):
            end = resync.search(start + 1)
    if end is not None:
        w.pos = end
        return Reject(name, offset, reason, record)
    w.pos = None
    # The last element is broken and the array closed, or the file was cut off: an array of
    # objects ends in '}' then ']' (a cut inside a string rarely leaves exactly that).
    tail = w.buf.rstrip(_WS)
    closed = tail.endswith("]") and (resync.element_start is None or tail[:-1].rstrip(_WS).endswith("}"))
    if closed and not resync.open_at_eof:
        return Reject(name, offset, reason, record)
    return Reject(name, offset, "truncated input: element cut off", record, fatal=True)


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
            if item.fatal:
                return
            continue
        offset, element = item
        if not isinstance(element, dict):
            yield Reject(name, offset, "not an object", excerpt(element))
            continue
        caption, problem = first_gpt_turn(element)
        problem = problem or caption_problem(caption)
        if problem is None and "image" not in element:
            problem = "missing field: image"
        problem = problem or id_problem(element.get("id"))
        if problem:
            yield Reject(name, offset, problem, excerpt(element))
            continue
        source_id = element.get("id")
        # an element's own `split` (synth writes one) wins; --split names the split of the others
        own_split = isinstance(element.get("split"), str)
        split = element["split"] if own_split else options.split
        used = ("id", "image", "conversations", "split") if own_split else ("id", "image", "conversations")
        meta = {k: v for k, v in element.items() if k not in used}  # a split that is no name stays here
        yield Record(
            source=NAME,
            input=name,
            location=offset,
            source_id=None if source_id is None else str(source_id),
            image=element["image"],
            caption=caption,
            split=split,
            meta=meta,
        )

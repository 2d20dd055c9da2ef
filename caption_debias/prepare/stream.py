"""The single ordered stream: inputs -> records with unique keys -> chunks of `shard_rows` records.

It runs in the main process only, so keys, duplicate suffixes and chunk boundaries do not
depend on how many workers process the chunks.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from caption_debias.readers import detect, get_reader
from caption_debias.readers.common import caption_text_problem, image_problem, input_stem
from caption_debias.records import Record, Reject, excerpt


def reason_group(reason: str) -> str:
    """'missing field: image' -> 'missing field' (reasons carry details after ': ')."""
    return reason.split(": ", 1)[0]


@dataclass
class InputCounts:
    path: str
    format: str
    read: int = 0
    rejected: int = 0  # by the reader or the stream; text-step rejects are added by workers
    duplicate_keys: int = 0
    complete: bool = True


def sorted_json_encoder() -> Callable[[Any], str]:
    """A function equal to json.dumps(obj, ensure_ascii=False, sort_keys=True, default=str), for plain data.

    One encoder, made once: json.dumps builds a new JSONEncoder per call with these options.
    No circular-reference check (the data comes from JSON, CSV or Parquet rows, which cannot
    hold cycles).
    """
    return json.JSONEncoder(ensure_ascii=False, sort_keys=True, default=str, check_circular=False).encode


_RECORD_JSON = sorted_json_encoder()
_HASH_BATCH = 256  # records per sha256 update in Chunk.fingerprint


@dataclass
class Chunk:
    """One future shard: its records in input order plus the rejects read alongside them."""

    index: int
    records: list[tuple[str, Record]] = field(default_factory=list)  # (key, record)
    rejects: list[Reject] = field(default_factory=list)
    # per input path: [read, rejected, duplicate_keys] within this chunk
    counts: dict[str, list[int]] = field(default_factory=dict)

    def count(self, input_name: str, read: int = 0, rejected: int = 0, duplicate: int = 0) -> None:
        c = self.counts.setdefault(input_name, [0, 0, 0])
        c[0] += read
        c[1] += rejected
        c[2] += duplicate

    def fingerprint(self) -> str:
        """Hash of everything the chunk carries: a resumed run reuses a shard only if it matches."""
        h = hashlib.sha256()
        encode = _RECORD_JSON  # = json.dumps(..., ensure_ascii=False, sort_keys=True, default=str)
        records = self.records
        for i in range(0, len(records), _HASH_BATCH):  # one update per batch hashes the same bytes
            h.update(
                "".join(
                    [
                        encode([key, r.source, r.image, r.caption, r.split, r.location, r.meta])
                        for key, r in records[i : i + _HASH_BATCH]
                    ]
                ).encode("utf-8", "surrogatepass")
            )
        for j in self.rejects:
            h.update(json.dumps(j.to_json(), ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
        return h.hexdigest()


_blake2b = hashlib.blake2b


class KeyAssigner:
    """Unique keys in input order; duplicates get '#2', '#3', ...

    Keys are remembered as 8-byte blake2b digests, not strings, so 1.25M keys cost ~60 MB;
    a digest collision (p ~ 1e-7 at that size) only adds an unneeded suffix, keys stay unique.
    """

    def __init__(self) -> None:
        self.seen: set[bytes] = set()
        self.next_suffix: dict[bytes, int] = {}

    @staticmethod
    def _digest(key: str) -> bytes:
        return _blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()

    def assign(self, base: str) -> tuple[str, bool]:
        d = self._digest(base)
        seen = self.seen
        if d not in seen:
            seen.add(d)
            return base, False
        n = self.next_suffix.get(d, 2)
        while True:
            key = f"{base}#{n}"
            kd = self._digest(key)
            n += 1
            if kd not in self.seen:
                self.seen.add(kd)
                self.next_suffix[d] = n
                return key, True


def base_key(record: Record, stem: str) -> str:
    if record.source_id is not None and str(record.source_id).strip():
        return f"{record.source}/{record.source_id}"
    return f"{record.source}/{stem}:{record.location}"


def resolve_format(path: Path, fmt: str) -> str:
    return detect(path) if fmt == "auto" else fmt


def _guarded(items: Iterator[Record | Reject], name: str, counts: InputCounts) -> Iterator[Record | Reject]:
    """A disk error mid-input (unreadable file, vanished folder) ends that input like a cut-off file."""
    while True:
        try:
            item = next(items)
        except StopIteration:
            return
        except OSError as exc:
            yield Reject(
                name, counts.read, f"truncated input: read error ({exc.__class__.__name__}: {exc})", "", fatal=True
            )
            return
        yield item


def chunks(
    inputs: list[tuple[str, Path, str]],
    options,
    totals: dict[str, InputCounts],
    on_read: Callable[[int], None] | None = None,
) -> Iterator[Chunk]:
    """Chunks of up to `shard_rows` records, in input order.

    A full chunk is held back until the next record arrives, so rejects read after its last
    record still join it; a chunk is also cut when it holds `shard_rows` rejects (then it may
    have fewer records, or none: it gets a sidecar but no shard).
    """
    keys = KeyAssigner()
    assign = keys.assign
    current = Chunk(0)
    read_so_far = 0
    limit = getattr(options, "limit", None)
    for name, path, fmt in inputs:
        if limit is not None and read_so_far >= limit:
            break
        counts = totals[name]
        stem = input_stem(path)
        for item in _guarded(get_reader(fmt)(path, name, options), name, counts):
            if limit is not None and read_so_far >= limit:
                break  # --limit: the first N records only
            counts.read += 1
            read_so_far += 1
            if on_read is not None and read_so_far % 1000 == 0:
                on_read(read_so_far)
            if isinstance(item, Record):
                problem = image_problem(item.image)
                if problem:
                    item = Reject(name, item.location, problem, excerpt(item.image))
                elif problem := caption_text_problem(item.caption):
                    item = Reject(name, item.location, problem, excerpt(item.caption))
            if isinstance(item, Reject):
                counts.rejected += 1
                current.rejects.append(item)
                current.count(name, read=1, rejected=1)
                if item.fatal:
                    counts.complete = False
                if len(current.rejects) >= options.shard_rows:  # an input of mostly rejects stays bounded too
                    yield current
                    current = Chunk(current.index + 1)
                continue
            if len(current.records) >= options.shard_rows:
                yield current
                current = Chunk(current.index + 1)
            key, duplicate = assign(base_key(item, stem))
            current.records.append((key, item))
            current.count(name, read=1, duplicate=int(duplicate))
            counts.duplicate_keys += duplicate
    if current.records or current.rejects:
        yield current

"""Planted faults in a synthetic world, with the answer key written beside it (OUT/planted.json).

A curation signal is measured by what it finds among faults whose place is known. Three kinds,
each a disjoint set of rows chosen from the seed (`plant_plan`):

- `hallucinated`: one detail sentence of the caption swapped for a detail sentence of a scene
  of another group; both objects it names (the subject and the one it is placed against) are
  absent from the picture, so the sentence describes things the picture lacks.
- `mismatched`: the row carries the caption of another image of another group (the chosen rows
  pass their captions round in a cycle, so no caption is written twice).
- `redrawn`: the row becomes a second drawing of an earlier row's scene (fresh position jitter,
  so the pixels and perceptual hash differ) with a freshly worded caption of that scene, and it
  joins that scene's group; the earlier row is kept as it was.

With `PlantSpec.dump()` (synth --plant-curate-faults) the faults `curate` finds are planted too,
each on rows none of the kinds above touched, a copy always after its source (`plant_more`):

- `duplicate_image`: the row's picture is an earlier row's, byte for byte (its caption its own);
- `reencoded`: an earlier row's picture saved as JPEG: other bytes, the same picture;
- `duplicate_caption`: an earlier row's caption, word for word, under the row's own picture;
- `near_duplicate_caption`: an earlier row's caption with one word changed;
- `repetition_loop`: the caption's last sentence repeated three more times (a generator stuck);
- `cut_off`: the caption stops mid-way through its last sentence;
- `broken_image`: the picture's file cut to its first half (undecodable);
- `tiny_image`: the picture at 16 x 16 pixels;
- `missing_image`: no file where the row's picture should be.

With an evaluation world beside it (synth --plant-eval-leaks EVAL, `plant_leaks`), some rows no
other kind touched become copies of that world's rows: `eval_leak`, each with what was copied:

- `both`: the eval row's picture (its file's bytes) and its caption;
- `image`: the eval row's picture under the row's own caption;
- `caption`: the eval row's caption under the row's own picture.

A copied picture is written at the eval row's own relative path (`images/test_000123.png`), as
ShareGPT4V-1k's records name files of the training images: `curate --decontaminate
sharegpt4v-1k=EVAL/sharegpt4v.json` reads the eval world's records and finds those files under
the training root.

Every other row is byte-for-byte what the unplanted world of the same seed writes: planting
draws from its own random streams, after the world is made.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from caption_debias.errors import UserError

PLANTED_FILE = "planted.json"
KINDS = ("hallucinated", "mismatched", "redrawn")
# The faults curate finds (PlantSpec.dump); the copy kinds take an earlier clean row as their source.
COPY_KINDS = ("duplicate_image", "reencoded", "duplicate_caption", "near_duplicate_caption")
ROW_KINDS = ("repetition_loop", "cut_off", "broken_image", "tiny_image", "missing_image")
CURATE_KINDS = (*COPY_KINDS, *ROW_KINDS)
# Shares of rows with each fault in a raw web-scale or LLM-captioned dump (rough orders of magnitude,
# so a small world holds a few of each): duplicates of both kinds are the commonest.
DUMP_RATES = {
    "duplicate_image": 0.03,
    "reencoded": 0.02,
    "duplicate_caption": 0.02,
    "near_duplicate_caption": 0.02,
    "repetition_loop": 0.01,
    "cut_off": 0.02,
    "broken_image": 0.01,
    "tiny_image": 0.01,
    "missing_image": 0.01,
}
# Eval leaks: the share of rows copied from an evaluation world (at least one of each copy kind).
LEAK_RATE = 0.02
LEAK_COPIES = ("both", "image", "caption")
# How `prepare` keys a ShareGPT4V record: '<source>/<id>' (schemas/shard.schema.json, key).
KEY_PREFIX = "sharegpt4v/"
_TRIES = 1000


@dataclass(frozen=True)
class PlantSpec:
    """Fractions of the world's rows planted with each fault (issue 22's defaults)."""

    hallucinated: float = 0.20
    mismatched: float = 0.05
    redrawn: float = 0.05
    duplicate_image: float = 0.0
    reencoded: float = 0.0
    duplicate_caption: float = 0.0
    near_duplicate_caption: float = 0.0
    repetition_loop: float = 0.0
    cut_off: float = 0.0
    broken_image: float = 0.0
    tiny_image: float = 0.0
    missing_image: float = 0.0

    @classmethod
    def dump(cls, **fractions: float) -> "PlantSpec":
        """Every fault, the curate ones at a raw dump's rates (DUMP_RATES); `fractions` override."""
        return cls(**{**DUMP_RATES, **fractions})

    def curate_faults(self) -> bool:
        return any(getattr(self, kind) for kind in CURATE_KINDS)

    def fractions(self) -> dict[str, float]:
        """The fractions the key records: the first three kinds, and the curate kinds when any is planted."""
        given = asdict(self)
        return given if self.curate_faults() else {k: given[k] for k in KINDS}

    def more_counts(self, n: int, free: int) -> dict[str, int]:
        """Rows per curate kind (at least 1 when asked for), refused when the clean rows cannot hold them."""
        counts = {kind: max(1, round(getattr(self, kind) * n)) if getattr(self, kind) else 0 for kind in CURATE_KINDS}
        needed = sum(counts.values()) + sum(counts[k] for k in COPY_KINDS)  # a copy also takes its source
        if needed > free:
            raise UserError(
                f"cannot plant {counts} in the {free} rows no other fault touched: a larger world, or lower fractions"
            )
        return counts

    def counts(self, n: int) -> dict[str, int]:
        """Rows per kind: the fraction of n, rounded; mismatched takes at least 2 when asked for
        (a caption goes to another row, so one alone has nothing to trade with)."""
        for kind, value in asdict(self).items():
            if not 0.0 <= value < 1.0:
                raise UserError(f"--plant-{kind} must be a fraction in [0, 1), got {value}")
        counts = {kind: round(getattr(self, kind) * n) for kind in KINDS}
        if counts["mismatched"] == 1:
            counts["mismatched"] = 2
        # a redrawn row needs an untouched earlier row to copy
        needed = counts["hallucinated"] + counts["mismatched"] + 2 * counts["redrawn"]
        if needed > n:
            raise UserError(f"cannot plant {counts} in {n} rows: the fractions leave too few clean rows")
        return counts


@dataclass
class RowText:
    """A row's caption as the world wrote it: its sentences and the object names each one says."""

    sentences: list[str]
    named: list[frozenset[str]]
    detail: list[int]  # indices of the detail sentences (one per object)


def plant_plan(
    groups: Sequence[str],
    objects: Sequence[frozenset[str]],
    texts: Sequence[RowText],
    spec: PlantSpec,
    seed: int,
    split: str,
) -> dict[str, Any]:
    """Which rows get which fault, from the seed alone. `objects[i]` are the names (colour shape)
    of the objects row i's picture shows. Returns {kind: [entry, ...]} with row indices; the
    caller draws the redrawn rows' pictures and captions."""
    n = len(texts)
    counts = spec.counts(n)
    rng = random.Random(f"plant:{split}:{seed}")
    order = rng.sample(range(n), n)
    h, m, r = counts["hallucinated"], counts["mismatched"], counts["redrawn"]
    hallucinated = sorted(order[:h])
    pool = sorted(order[h + m : h + m + 2 * r])
    mismatched = _across_groups(order[h : h + m], order[h + m + 2 * r :], groups)
    rng.shuffle(pool)
    pairs = sorted((min(a, b), max(a, b)) for a, b in zip(pool[0::2], pool[1::2]))
    copies = {copy for _, copy in pairs}

    plan: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    donors = [i for i in range(n) if i not in copies]  # a copy's own scene is gone from the world
    for row in hallucinated:
        index = rng.choice(texts[row].detail)
        for _ in range(_TRIES):
            donor = rng.choice(donors)
            if groups[donor] == groups[row]:
                continue
            j = rng.choice(texts[donor].detail)
            if texts[donor].named[j] & objects[row] or texts[donor].sentences[j] in texts[row].sentences:
                continue
            break
        else:
            raise UserError(f"row {row}: no detail sentence of another group names only absent objects")
        plan["hallucinated"].append(
            {"row": row, "sentence": index, "donor": donor, "donor_sentence": j, "text": texts[donor].sentences[j]}
        )

    for _ in range(_TRIES):
        rng.shuffle(mismatched)
        cycle = list(zip(mismatched, mismatched[1:] + mismatched[:1]))
        if all(groups[row] != groups[other] for row, other in cycle):
            break
    else:
        cycle = _interleaved_cycle(mismatched, groups)
    plan["mismatched"] = [{"row": row, "caption_of": other} for row, other in sorted(cycle)]
    plan["redrawn"] = [{"row": copy, "copy_of": source} for source, copy in pairs]
    return plan


def _across_groups(chosen: Sequence[int], spare: Sequence[int], groups: Sequence[str]) -> list[int]:
    """The rows that trade captions, such that no group holds more than half of them (else some caption
    would stay in its group): `chosen` as drawn when it already is so, else its largest group's last
    rows traded for the first `spare` (clean) rows of other groups, in the seed's order."""
    chosen, spare = list(chosen), list(spare)
    while chosen:
        big, size = Counter(groups[i] for i in chosen).most_common(1)[0]
        if size <= len(chosen) // 2:
            break
        other = next((i for i in spare if groups[i] != big), None)
        if other is None:
            raise UserError(
                f"cannot plant {len(chosen)} mismatched captions: too few rows outside one group (world too small)"
            )
        spare.remove(other)
        last = max(k for k, i in enumerate(chosen) if groups[i] == big)
        chosen[last] = other
    return chosen


def _interleaved_cycle(rows: list[int], groups: Sequence[str]) -> list[tuple[int, int]]:
    """A cycle through `rows` with no two neighbours of one group (no group holds more than half of
    them): the rows by group, largest first, laid on the even places, then the odd ones."""
    size = Counter(groups[i] for i in rows)
    ranked = sorted(rows, key=lambda i: (-size[groups[i]], groups[i], i))
    places = [*range(0, len(rows), 2), *range(1, len(rows), 2)]
    ring = [0] * len(rows)
    for place, row in zip(places, ranked):
        ring[place] = row
    return list(zip(ring, ring[1:] + ring[:1]))


def plant_more(plan: dict[str, Any], n: int, spec: PlantSpec, seed: int, split: str) -> dict[str, list[dict[str, Any]]]:
    """The curate kinds' rows, from their own seeded stream, among rows `plan` left alone:
    {kind: [{"row", "source"?, "word"?}]}; a copy's source is an earlier clean row, used once."""
    touched = {e["row"] for kind in KINDS for e in plan.get(kind, [])}
    touched |= {e["copy_of"] for e in plan.get("redrawn", [])}
    free = [i for i in range(n) if i not in touched]
    counts = spec.more_counts(n, len(free))
    rng = random.Random(f"plant-more:{split}:{seed}")
    pool = rng.sample(free, len(free))
    more: dict[str, list[dict[str, Any]]] = {kind: [] for kind in CURATE_KINDS}
    for kind in CURATE_KINDS:
        for _ in range(counts[kind]):
            if kind in COPY_KINDS:
                a, b = pool.pop(), pool.pop()
                more[kind].append({"row": max(a, b), "source": min(a, b)})
            else:
                more[kind].append({"row": pool.pop()})
        more[kind].sort(key=lambda e: e["row"])
    for entry in more["near_duplicate_caption"]:
        entry["word"] = rng.random()  # which word changes, as a share of the caption's words
    return more


def plant_leaks(plan: dict[str, Any], n: int, eval_rows: int, seed: int, split: str) -> list[dict[str, Any]]:
    """The eval leaks' rows, from their own seeded stream, among rows no other kind touched (nor took as
    a source): [{"row", "eval_row", "copied"}], each eval row copied once."""
    touched = {e["row"] for entries in plan.values() for e in entries}
    touched |= {e[k] for entries in plan.values() for e in entries for k in ("copy_of", "source") if k in e}
    free = [i for i in range(n) if i not in touched]
    count = max(len(LEAK_COPIES), round(LEAK_RATE * n))
    if count > len(free) or count > eval_rows:
        raise UserError(
            f"cannot plant {count} eval leaks: {len(free)} rows no other fault touched, {eval_rows} eval rows"
        )
    rng = random.Random(f"plant-leaks:{split}:{seed}")
    rows = sorted(rng.sample(free, count))
    evals = rng.sample(range(eval_rows), count)
    return [
        {"row": row, "eval_row": e, "copied": LEAK_COPIES[k % len(LEAK_COPIES)]}
        for k, (row, e) in enumerate(zip(rows, evals))
    ]

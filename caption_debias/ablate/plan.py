"""An ablation plan: one file (TOML, YAML or JSON, read by options.load_config_file as --config is)
naming the base folder, the arms, one train recipe and the evaluation. `read_plan` checks all of it
before anything runs and reports every fault, one line each.

    base = "scored/"                  # a prepared or scored folder
    image_root = "world/"             # optional: where its images are (default: its manifest's)
    planted = "world/"                # optional: a synth --plant world, for fault recall / precision
    [arms.baseline]                   # the reference: the base as it is (added when not named)
    [arms.rules]                      # no options: curate's default rules applied to the base
    [arms.clip]
    min_clip_score = 0.3              # any curate option, applied to the base
    [arms.mine]
    folder = "curated-by-hand/"       # an existing prepared or curated folder
    [train]
    model = "demo-start"              # the start model, the same for every arm
    recipe = "debias"
    steps = 300                       # the same step budget for every arm
    batch_size = 64
    lr = 1e-3
    seeds = [0, 1, 2]
    [eval]
    data = ["test/", "urban1k=/data/Urban1k"]   # prepared folders, or NAME=PATH of a benchmark
    variants = ["keep", "remove", "move", "first"]
    short = "coco=/data/coco"         # optional short-text set (default: the first set's opening sentences)
    zeroshot = "classes/"             # optional folder-per-class set
    grounding = "planted-test/"       # optional: a prepared `synth --plant` world, grounding AUROC per arm
    alphas = [1.0, 0.5]               # WiSE-FT: each trained arm evaluated at each alpha
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from caption_debias.errors import UserError

REFERENCE = "baseline"
TOP_KEYS = ("base", "image_root", "planted", "arms", "train", "eval")
TRAIN_KEYS_OWN = ("steps", "seeds")  # the plan's spellings of max_steps and seed
# TrainConfig fields a plan may not set: ablate decides them for every arm alike
TRAIN_FIXED = (
    "data",
    "out",
    "logs",
    "name",
    "image_root",
    "seed",
    "max_steps",
    "epochs",
    "resume",
    "quiet",
    "log_interval",
    "val_data",
    "val_image_root",
    "val_frequency",
    "device",
)
# curate options a plan may not set per arm: the command's own flags decide them
CURATE_FIXED = ("quiet", "log_interval", "overwrite", "workers", "engine", "ray_address", "image_root")
EVAL_KEYS = ("data", "image_root", "variants", "short", "zeroshot", "grounding", "alphas", "batch_size", "resamples")
DEFAULT_VARIANTS = ("keep", "remove", "move", "first")
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}"


@dataclass(frozen=True)
class Arm:
    """A curation variant: curate options applied to the base (none: curate's defaults), or an
    existing folder; the reference arm is the base as it is."""

    name: str
    curate: dict[str, Any] = field(default_factory=dict)
    folder: str | None = None

    @property
    def kind(self) -> str:
        return "folder" if self.folder else ("base" if self.name == REFERENCE else "curate")


@dataclass(frozen=True)
class EvalSet:
    """A held-out set: a prepared folder (`kind` prepared) or a named benchmark's layout."""

    label: str
    kind: str
    path: str
    image_root: str | None = None


@dataclass
class Plan:
    path: str
    base: str
    image_root: str | None
    planted: str | None
    arms: list[Arm]
    train: dict[str, Any]  # TrainConfig fields shared by every arm (without data, out, seed, max_steps)
    steps: int
    seeds: list[int]
    eval_sets: list[EvalSet]
    variants: list[str]
    short: EvalSet | None  # None: the first eval set's `first` variant is the short-text set
    zeroshot: str | None
    alphas: list[float]
    grounding: str | None = None  # a prepared folder of a `synth --plant` world: each model's grounding AUROC
    batch_size: int = 64
    resamples: int = 2000

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Faults:
    """Every fault of a plan, one line each, raised together."""

    def __init__(self, path: Path) -> None:
        self.path, self.lines = path, list[str]()

    def add(self, where: str, text: str) -> None:
        self.lines.append(f"{where}: {text}")

    def check(self, where: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except UserError as exc:
            self.add(where, str(exc))
            return None

    def raise_if_any(self) -> None:
        if self.lines:
            n = len(self.lines)
            head = f"plan {self.path}: {n} fault{'s' if n > 1 else ''}"
            raise UserError("\n".join([head, *(f"  {line}" for line in self.lines)]))


def _unknown(faults: _Faults, where: str, key: str, known: list[str]) -> None:
    near = difflib.get_close_matches(key, known, n=1)
    faults.add(
        f"{where}.{key}",
        f"unknown key ({'did you mean ' + repr(near[0]) + '?' if near else 'known: ' + ', '.join(known)})",
    )


def _folder(faults: _Faults, where: str, value: Any, here: Path) -> str | None:
    """A folder with a manifest, relative to the plan file's folder."""
    if not isinstance(value, str) or not value:
        faults.add(where, f"expected a folder path, got {value!r}")
        return None
    path = Path(value) if Path(value).is_absolute() else here / value
    if not path.is_dir():
        faults.add(where, f"{path}: no such folder")
        return None
    if not (path / "manifest.json").is_file():
        faults.add(where, f"{path}: no manifest.json (not a finished prepared, scored or curated folder)")
        return None
    return str(path)


def _path(value: str, here: Path) -> str:
    return str(Path(value) if Path(value).is_absolute() else here / value)


def read_plan(path: str | Path) -> Plan:
    """The plan at `path`, checked: every fault is one line of one UserError."""
    from caption_debias.options import load_config_file

    path = Path(path)
    try:
        raw = load_config_file(path, nested=True)
    except UserError as exc:
        raise UserError(str(exc).replace("--config ", "plan ", 1)) from None
    here = path.resolve().parent
    faults = _Faults(path)
    for key in raw:
        if key not in TOP_KEYS:
            _unknown(faults, "plan", str(key), list(TOP_KEYS))
    base = None
    if "base" in raw:
        base = _folder(faults, "base", raw.get("base"), here)
    else:
        faults.add("base", "missing")
    image_root = raw.get("image_root")
    if image_root is not None:
        image_root = _path(str(image_root), here)
        if not Path(image_root).is_dir():
            faults.add("image_root", f"{image_root}: no such folder")
    planted = raw.get("planted")
    if planted is not None:
        planted = _path(str(planted), here)
        if not (Path(planted) / "planted.json").is_file() and not Path(planted).name == "planted.json":
            faults.add("planted", f"{planted}: no planted.json (a world written by `synth --plant`)")
        elif Path(planted).name == "planted.json":
            planted = str(Path(planted).parent)
    arms = _arms(faults, raw.get("arms"), here)
    train, steps, seeds = _train(faults, raw.get("train"), here)
    evals = _eval(faults, raw.get("eval"), here)
    if train is not None and evals is not None and min(evals["alphas"]) < 1:
        from caption_debias.model.names import random_weights

        if random_weights(str(train.get("model", "")), train.get("pretrained")):
            faults.add(
                "eval.alphas", "an alpha below 1 mixes in the start's weights: a random-init start has none to mix"
            )
    faults.raise_if_any()
    if base is None or train is None or evals is None:  # each was a fault, raised above
        raise UserError(f"plan {path}: incomplete")
    return Plan(
        path=str(path),
        base=base,
        image_root=image_root,
        planted=planted,
        arms=arms,
        train=train,
        steps=steps,
        seeds=seeds,
        **evals,
    )


def _arms(faults: _Faults, raw: Any, here: Path) -> list[Arm]:
    from caption_debias.curate.options import CurateOptions
    from caption_debias.options import check_value, fields_of

    known = [name for name in fields_of(CurateOptions) if name not in CURATE_FIXED]
    if not isinstance(raw, dict) or not raw:
        faults.add("arms", "expected a table of named arms (each a table of curate options, or folder = PATH)")
        return []
    arms: list[Arm] = []
    for name, spec in raw.items():
        where = f"arms.{name}"
        if not re.fullmatch(NAME_PATTERN, str(name)):
            faults.add(where, "an arm's name is letters, digits, '_', '-', '+' or '.' (it names a folder)")
            continue
        if spec is None:
            spec = {}
        if not isinstance(spec, dict):
            faults.add(where, f"expected a table of curate options (or folder = PATH), got {spec!r}")
            continue
        if "folder" in spec:
            others = sorted(k for k in spec if k != "folder")
            if others:
                faults.add(where, f"folder = PATH takes no curate options ({', '.join(others)})")
            folder = _folder(faults, f"{where}.folder", spec["folder"], here)
            arms.append(Arm(str(name), folder=folder))
            continue
        options: dict[str, Any] = {}
        for key, value in spec.items():
            key = str(key).replace("-", "_")
            if key not in known:
                _unknown(faults, where, key, known)
                continue
            value = _curate_paths(key, value, here)
            checked = faults.check(f"{where}.{key}", check_value, CurateOptions, key, value)
            options[key] = checked if checked is not None else value
        if name == REFERENCE and options:
            faults.add(where, f"the reference arm `{REFERENCE}` is the base as it is: give it no options")
        arms.append(Arm(str(name), curate=options))
    if REFERENCE not in {a.name for a in arms}:
        arms.insert(0, Arm(REFERENCE))
    else:  # the reference first: every table reads from it
        arms.sort(key=lambda a: a.name != REFERENCE)
    return arms


CURATE_PATHS = ("exclude_keys", "include_keys", "keep_keys")


def _curate_paths(key: str, value: Any, here: Path) -> Any:
    """A curate option's file (a keys file, an eval set's NAME=PATH) relative to the plan's folder."""
    if key in CURATE_PATHS and isinstance(value, str) and value:
        return _path(value, here)
    if key == "decontaminate" and isinstance(value, list):
        return [
            f"{v.partition('=')[0]}={_path(v.partition('=')[2], here)}" if isinstance(v, str) and "=" in v else v
            for v in value
        ]
    return value


def _model_path(spec: str, here: Path) -> str:
    """A start model given as a path (a run folder, local-dir:DIR) is relative to the plan's folder."""
    prefix = "local-dir:" if spec.startswith("local-dir:") else ""
    rest = spec[len(prefix) :]
    if rest and not Path(rest).is_absolute() and (here / rest).exists():
        return prefix + str(here / rest)
    return spec


def _train(faults: _Faults, raw: Any, here: Path) -> tuple[dict[str, Any] | None, int, list[int]]:
    from caption_debias.options import check_value, fields_of
    from caption_debias.train.config import TrainConfig

    if not isinstance(raw, dict):
        faults.add("train", "expected a table: model, recipe, steps, batch_size, lr, seeds, ...")
        return None, 0, []
    known = [*TRAIN_KEYS_OWN, *(n for n in fields_of(TrainConfig) if n not in TRAIN_FIXED)]
    options: dict[str, Any] = {}
    for key, value in raw.items():
        key = str(key).replace("-", "_")
        if key in TRAIN_FIXED:
            faults.add(f"train.{key}", "set by ablate for every arm alike (steps and seeds are the plan's)")
        elif key not in known:
            _unknown(faults, "train", key, known)
        elif key not in TRAIN_KEYS_OWN:
            checked = faults.check(f"train.{key}", check_value, TrainConfig, key, value)
            options[key] = checked if checked is not None else value
    if "model" not in raw:
        faults.add("train.model", "missing (the start model every arm fine-tunes)")
    elif isinstance(options.get("model"), str):
        options["model"] = _model_path(options["model"], here)
    steps = raw.get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        faults.add("train.steps", f"a whole number of steps, at least 1, the same for every arm (got {steps!r})")
        steps = 0
    seeds = raw.get("seeds", [0])
    seeds = [seeds] if isinstance(seeds, int) and not isinstance(seeds, bool) else seeds
    if (
        not isinstance(seeds, list)
        or not seeds
        or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        faults.add("train.seeds", f"a list of distinct whole numbers (got {raw.get('seeds')!r})")
        seeds = []
    return options, steps, list(seeds)


def _eval_set(faults: _Faults, where: str, value: Any, here: Path, image_root: str | None) -> EvalSet | None:
    from caption_debias.evaluate.benchmarks import BENCHMARKS

    if not isinstance(value, str) or not value:
        faults.add(where, f"a prepared folder or NAME=PATH of a benchmark, got {value!r}")
        return None
    name, eq, rest = value.partition("=")
    if eq and name in BENCHMARKS:
        path = _path(rest, here)
        if not Path(path).exists():
            faults.add(where, f"{path}: no such file or folder")
            return None
        return EvalSet(name, name, path)
    if eq and not Path(_path(value, here)).exists():
        faults.add(where, f"unknown benchmark {name!r} (choose from {', '.join(BENCHMARKS)})")
        return None
    folder = _folder(faults, where, value, here)
    return None if folder is None else EvalSet(Path(folder).name, "prepared", folder, image_root)


def _grounding(faults: _Faults, value: Any, here: Path) -> str | None:
    """A prepared folder of a planted world: its manifest's image root holds the world's planted.json."""
    if value is None:
        return None
    folder = _folder(faults, "eval.grounding", value, here)
    if folder is None:
        return None
    from caption_debias.image_source.roots import folder_root

    try:
        root = folder_root(folder)
    except UserError as exc:
        faults.add("eval.grounding", str(exc))
        return None
    if root is None or not (Path(str(root)) / "planted.json").is_file():
        faults.add(
            "eval.grounding", f"{folder}: its images' folder holds no planted.json (prepare a `synth --plant` world)"
        )
        return None
    return folder


def _eval(faults: _Faults, raw: Any, here: Path) -> dict[str, Any] | None:
    from caption_debias.evaluate.variants import parse_variant

    if not isinstance(raw, dict):
        faults.add("eval", "expected a table: data (prepared folders or NAME=PATH), variants, short, zeroshot, alphas")
        return None
    for key in raw:
        if key not in EVAL_KEYS:
            _unknown(faults, "eval", str(key), list(EVAL_KEYS))
    image_root = _path(str(raw["image_root"]), here) if raw.get("image_root") is not None else None
    if image_root is not None and not Path(image_root).is_dir():
        faults.add("eval.image_root", f"{image_root}: no such folder")
    data = raw.get("data")
    data = [data] if isinstance(data, str) else data
    sets: list[EvalSet] = []
    if not isinstance(data, list) or not data:
        faults.add("eval.data", "at least one held-out set: a prepared folder or NAME=PATH of a benchmark")
    else:
        for i, value in enumerate(data):
            one = _eval_set(faults, f"eval.data[{i}]", value, here, image_root)
            if one is not None:
                sets.append(one)
        labels = [s.label for s in sets]
        if len(set(labels)) != len(labels):
            faults.add("eval.data", f"the same set is named twice ({', '.join(labels)})")
    variants = raw.get("variants", list(DEFAULT_VARIANTS))
    if not isinstance(variants, list) or not variants:
        faults.add("eval.variants", f"a list of caption variants (got {variants!r})")
        variants = []
    for v in variants:
        faults.check("eval.variants", parse_variant, str(v))
    short = None
    if raw.get("short") is not None:
        short = _eval_set(faults, "eval.short", raw["short"], here, image_root)
    zeroshot = raw.get("zeroshot")
    if zeroshot is not None:
        zeroshot = _path(str(zeroshot), here)
        if not Path(zeroshot).is_dir():
            faults.add("eval.zeroshot", f"{zeroshot}: no such folder (one sub-folder per class)")
    grounding = _grounding(faults, raw.get("grounding"), here)
    alphas = raw.get("alphas", [1.0])
    alphas = [alphas] if isinstance(alphas, (int, float)) and not isinstance(alphas, bool) else alphas
    if (
        not isinstance(alphas, list)
        or not alphas
        or any(isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 <= a <= 1 for a in alphas)
    ):
        faults.add("eval.alphas", f"a list of numbers in [0, 1] (got {raw.get('alphas')!r})")
        alphas = [1.0]
    numbers = {}
    for key, default, low in (("batch_size", 64, 1), ("resamples", 2000, 100)):
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            faults.add(f"eval.{key}", f"a whole number, at least {low} (got {value!r})")
            value = default
        numbers[key] = value
    return {
        "eval_sets": sets,
        "variants": [str(v) for v in dict.fromkeys(variants)],
        "short": short,
        "zeroshot": zeroshot,
        "grounding": grounding,
        "alphas": sorted({float(a) for a in alphas}, reverse=True),
        **numbers,
    }

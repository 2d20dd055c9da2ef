"""No import cycle between caption_debias's subpackages (and its top-level modules).

Every `caption_debias.X` import counts, the ones inside functions too: a lazy import still
makes X a dependency. A cycle means a shared piece belongs a floor lower.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "caption_debias"  # cli/ installs as caption_debias.cli: its own unit


def _unit_of(path: Path) -> str:
    """The top-level unit a source file belongs to: its subpackage, or its own module name at the root."""
    if path.is_relative_to(ROOT / "cli"):
        return "cli"
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported_units(tree: ast.AST) -> set[str]:
    units = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = (
                [node.module] if node.module != "caption_debias" else [f"caption_debias.{a.name}" for a in node.names]
            )
        else:
            continue
        units |= {name.split(".")[1] for name in names if name.startswith("caption_debias.")}
    return units


def unit_graph() -> dict[str, set[str]]:
    """unit -> the other units it imports from."""
    graph: dict[str, set[str]] = {}
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "cli").rglob("*.py")]):
        unit = _unit_of(path)
        if unit == "__init__":
            continue
        deps = _imported_units(ast.parse(path.read_text("utf-8"))) - {unit, "__version__"}
        graph.setdefault(unit, set()).update(deps)
    return graph


def test_no_import_cycle_between_subpackages():
    graph = unit_graph()
    assert {"train", "export", "text", "prepare", "readers", "cli"} <= set(graph)  # the scan sees the package
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        cycle = " -> ".join(exc.args[1])
        raise AssertionError(f"import cycle between caption_debias units: {cycle}") from None
    assert order.index("train") < order.index("cli")


def test_the_scan_finds_a_cycle_when_there_is_one():
    graph = unit_graph()
    assert "dataset" in graph["train"]
    graph["dataset"] = graph["dataset"] | {"train"}  # dataset importing train would close a loop
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError:
        return
    raise AssertionError("a planted cycle was not found")


def _module_name(path: Path) -> str:
    """caption_debias.stats.plots for caption_debias/stats/plots.py; cli/ installs as caption_debias.cli."""
    if path.is_relative_to(ROOT / "cli"):
        parts = ("caption_debias", "cli", *path.relative_to(ROOT / "cli").with_suffix("").parts)
    else:
        parts = ("caption_debias", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph() -> dict[str, set[str]]:
    """module -> the caption_debias modules it imports (`from PKG import name` counts as PKG.name when that is a module)."""
    paths = sorted([*PACKAGE.rglob("*.py"), *(ROOT / "cli").rglob("*.py")])
    modules = {_module_name(p): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("caption_debias")}
            elif (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and (node.module or "").startswith("caption_debias")
            ):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    deps.add(sub if sub in modules else node.module)
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def test_no_import_cycle_between_modules():
    graph = module_graph()
    assert {"caption_debias.stats.compute", "caption_debias.runner", "caption_debias.cli.main"} <= set(graph)
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"import cycle between caption_debias modules: {' -> '.join(exc.args[1])}") from None


def test_the_module_scan_finds_a_cycle_inside_a_package():
    graph = module_graph()
    assert "caption_debias.stats.curation" in graph["caption_debias.stats.plots"]
    graph["caption_debias.stats.curation"] = graph["caption_debias.stats.curation"] | {"caption_debias.stats.report"}
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError:
        return
    raise AssertionError("a planted cycle between two stats modules was not found")


def test_the_shared_plotting_helper_sits_at_the_root():
    """legend_outside is caption_debias/plotting.py's: evaluate draws its probe plots without importing stats."""
    from caption_debias.plotting import legend_outside

    assert "stats" not in unit_graph()["evaluate"]
    assert "caption_debias.plotting" in module_graph()["caption_debias.stats.plots"]
    import caption_debias.stats.plots as plots

    assert plots.legend_outside is legend_outside


# -- stages: siblings through their public modules only ---------------------------------------
# A stage package (one command's code) may use another stage only through the modules that stage
# offers others (docs/architecture.md, "Floors, no cycles"): its options class, its front door
# (`run`, `api`), and the few modules named below. Nothing of prepare/ is another stage's: what
# the stages share lives at the root (runner, engines, input_folders, dataset, ...). The floors
# every stage builds on (readers, text, model) are libraries, not stages.

STAGES = {"prepare", "curate", "score", "stats", "view", "evaluate", "pack", "train", "export", "synth"}
FRONT_DOOR = {"options", "run", "api"}
ALSO_PUBLIC = {
    "curate": {"rules"},  # its row rules, applied as they are (view's thresholds, map and neighbours)
    "evaluate": {"benchmarks", "retrieval"},  # public eval sets as read (curate's decontaminate, train's --val-data)
    "pack": {"folder"},  # a packed folder read back by index (train)
}
CLOSED = {"prepare"}  # no other stage imports any module of it


def stage_imports() -> list[tuple[str, str, list[str]]]:
    """(importing file, imported caption_debias module, imported names) for every import in a stage package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if _unit_of(path) not in STAGES:
            continue
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and (node.module or "").startswith("caption_debias")
            ):
                found.append((rel, node.module, [a.name for a in node.names]))
            elif isinstance(node, ast.Import):
                found += [(rel, a.name, []) for a in node.names if a.name.startswith("caption_debias.")]
    return found


def layer_violations(imports: list[tuple[str, str, list[str]]]) -> list[str]:
    """Each import of a sibling stage's module that is not public, or of a private name, or of prepare/."""
    bad = []
    for rel, module, names in imports:
        parts = module.split(".")
        stage = parts[1] if len(parts) > 1 else ""
        if stage not in STAGES or stage == rel.split("/")[0]:
            continue
        modules = [parts[2]] if len(parts) > 2 else names  # `from caption_debias.score import run` names the module
        what = f"{rel}: {module} ({', '.join(names) or 'module'})"
        if stage in CLOSED:
            bad.append(f"{what}: nothing of {stage}/ is another stage's")
        elif any(m not in FRONT_DOOR | ALSO_PUBLIC.get(stage, set()) for m in modules):
            bad.append(f"{what}: not a public module of {stage}/")
        elif any(n.startswith("_") for n in [*names, *parts[2:]]):
            bad.append(f"{what}: a private name")
    return bad


def test_stages_use_siblings_only_through_their_public_modules():
    imports = stage_imports()
    assert any(m == "caption_debias.score.run" for _, m, _ in imports)  # the scan sees curate --score-model
    assert layer_violations(imports) == []


def test_the_layer_scan_finds_private_and_closed_imports():
    planted = [
        ("curate/run.py", "caption_debias.prepare.distributor", ["ordered_map"]),  # prepare's machinery
        ("pack/run.py", "caption_debias.prepare.options", ["PrepareOptions"]),  # even prepare's front door
        ("curate/run.py", "caption_debias.score.shard", ["score_shard"]),  # a module score keeps to itself
        ("curate/run.py", "caption_debias.score.run", ["_score"]),  # a private name of a public module
        ("stats/samples.py", "caption_debias.view", ["app"]),  # `from PKG import module`
    ]
    assert len(layer_violations(planted)) == len(planted)
    assert layer_violations([("curate/run.py", "caption_debias.score.run", ["score_folder"])]) == []


# -- a report does not depend on the web app -------------------------------------------------
def test_stats_reads_rows_below_view():
    """stats' Samples and view's page share folder_rows/ (rows, removals, images, thumbnails); stats
    never imports view, and folder_rows imports no stage (so it stays below both)."""
    graph = unit_graph()
    assert "folder_rows" in graph["stats"] and "folder_rows" in graph["view"]  # the scan sees both sides
    assert "view" not in graph["stats"]
    assert graph["folder_rows"] & STAGES == set()


# -- Ray only in engines/ ------------------------------------------------------------------------
# One Ray path: the engines run a stage's tasks and its key group-by on Ray; a stage asks them
# (`engines.mapper`, `engines.repeated_keys`) and never imports Ray itself.


def ray_imports(package: Path = PACKAGE, cli: Path = ROOT / "cli") -> list[str]:
    """Every import of ray (`import ray`, `import ray.data as rd`, `from ray import ...`, `from ray.util import x`,
    `importlib.import_module("ray...")`, `__import__("ray")`) in a module outside caption_debias/engines/."""
    found = []
    for path in sorted([*package.rglob("*.py"), *cli.rglob("*.py")]):
        if path.is_relative_to(package / "engines"):
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                    names = [node.args[0].value]
            if any(n == "ray" or n.startswith("ray.") for n in names):
                found.append(f"{path.relative_to(package.parent).as_posix()}:{node.lineno}")
    return found


def test_ray_is_imported_only_in_engines():
    assert ray_imports() == []


def test_the_ray_scan_finds_every_form_of_import(tmp_path):
    package, cli = tmp_path / "caption_debias", tmp_path / "cli"
    (package / "curate").mkdir(parents=True)
    (package / "engines").mkdir()
    cli.mkdir()
    forms = [
        "import ray",
        "import ray.data as rd",
        "from ray import remote",
        "from ray.util.queue import Queue",
        "import os, ray",
        "importlib.import_module('ray.data')",
        "__import__('ray')",
    ]
    (package / "curate" / "ray_engine.py").write_text("\n".join(f"def f{i}():\n    {f}" for i, f in enumerate(forms)))
    (package / "engines" / "ray.py").write_text("import ray\n")  # the engines' own: allowed
    (cli / "main.py").write_text("import rayon\nimport array\nfrom raylib import x\n")  # not ray
    found = ray_imports(package, cli)
    assert len(found) == len(forms) and all("ray_engine.py" in f for f in found)

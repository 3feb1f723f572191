"""The package's layers: no import cycles between edgebuild's modules, at any depth, and no
module importing a layer above its own.

Every import counts: at the top, inside functions (a lazy import is still a dependency), under
``if TYPE_CHECKING:`` (a type named from a module is a dependency on it, run or not) and relative
ones. A circle is broken by moving the shared piece down, never by hiding an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "edgebuild"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every edgebuild module that ``name`` (at ``path``) imports: lazy, ``if TYPE_CHECKING:`` and relative ones too."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # from . import x, from ..y import z: relative to this module's package
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([module] if module else []))
            names = [module] + [f"{module}.{a.name}" for a in node.names]
        found.update(n for n in names if n in known)
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(files)
    return {name: _imports(name, path, known) - {name} for name, path in files.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


#: the layers, lowest first (docs/architecture.md): a module may import its own layer and those below
LAYERS: tuple[tuple[str, ...], ...] = (
    ("edgebuild", "edgebuild.errors", "edgebuild._compat"),  # shared with the device
    ("edgebuild.runtime.base",),  # the device side (Python 3.8 + numpy): what its jobs and the build side share
    ("edgebuild.runtime.engines",),
    ("edgebuild.runtime.serving", "edgebuild.runtime.bench", "edgebuild.runtime.streams"),
    ("edgebuild.runtime.ota",),  # its health check runs a model service
    ("edgebuild.runtime",),  # the device command line: cli, options, __main__
    ("edgebuild.content", "edgebuild.statcache", "edgebuild.datafiles", "edgebuild.jsontypes",
     "edgebuild.text"),  # build-host support
    ("edgebuild.targets",),
    ("edgebuild.project",),
    ("edgebuild.sources", "edgebuild.datasets"),  # what models and data are
    ("edgebuild.latency",),  # performance: predicted and measured latency
    ("edgebuild.accuracy",),
    ("edgebuild.devices",),
    ("edgebuild.shipping",),
    ("edgebuild.pipeline",),
    ("edgebuild.stages",),
    ("edgebuild.report",),
    ("edgebuild.workflows",),
    ("edgebuild.cli",),
    ("edgebuild.__main__",),
)


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest prefix that names ``module``'s package (or the module itself)."""
    best, found = -1, None
    for index, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, found = len(name), index
    if found is None:
        raise AssertionError(f"{module} is in no layer: add its package to LAYERS (and to docs/architecture.md)")
    return found


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{module} (layer {LAYERS[layer_of(module)][0]}) imports {target} "
                  f"(layer {LAYERS[layer_of(target)][0]})"
                  for module, targets in graph.items() for target in targets
                  if layer_of(target) > layer_of(module))


def test_no_module_imports_a_layer_above_its_own() -> None:
    graph = _graph()
    assert not upward_imports(graph), "\n".join(upward_imports(graph))


def test_the_layer_check_finds_an_upward_import() -> None:
    graph = {"edgebuild.runtime.serving.server": {"edgebuild.stages.engine"},
             "edgebuild.stages.engine": {"edgebuild.errors"}}
    assert upward_imports(graph) == ["edgebuild.runtime.serving.server (layer edgebuild.runtime.serving) imports "
                                     "edgebuild.stages.engine (layer edgebuild.stages)"]


def test_no_import_cycles_between_edgebuild_modules() -> None:
    graph = _graph()
    assert "edgebuild.pipeline.runner" in graph and graph["edgebuild.stages"]  # the scan sees the package
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_import_scan_counts_type_checking_lazy_and_relative_imports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    module = package / "a.py"
    module.write_text("from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    from pkg.b import B\n"
                      "def f():\n    from pkg import c\n"
                      "from .d import D\n")
    known = {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"}
    assert _imports("pkg.a", module, known) - {"pkg"} == {"pkg.b", "pkg.c", "pkg.d"}


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


#: what the stage runner must not know: it runs stages over the units it is given; targets, limit presets,
#: data and devices are decided above it (edgebuild.workflows.work, edgebuild.stages)
DOMAIN = ("edgebuild.accuracy", "edgebuild.datasets", "edgebuild.targets", "edgebuild.devices")


def domain_imports(imports: dict[str, set[str]]) -> list[str]:
    return sorted(f"{module} imports {target}" for module, targets in imports.items()
                  if module == "edgebuild.pipeline" or module.startswith("edgebuild.pipeline.")
                  for target in targets if any(target == d or target.startswith(d + ".") for d in DOMAIN))


def test_the_pipeline_knows_nothing_of_the_domain() -> None:
    imports = _graph()
    assert "edgebuild.pipeline.runner" in imports
    found = domain_imports(imports)
    assert not found, "the pipeline runs stages only; move this up (workflows/work.py, stages/):\n" + "\n".join(found)


def test_the_domain_check_finds_a_domain_import() -> None:
    assert domain_imports({"edgebuild.pipeline.runner": {"edgebuild.targets.profiles", "edgebuild.project.config"},
                           "edgebuild.stages.gate": {"edgebuild.accuracy.gate"}}) == [
        "edgebuild.pipeline.runner imports edgebuild.targets.profiles"]


def test_loading_a_project_runs_no_user_code() -> None:
    assert "edgebuild.sources.entry_point" not in _graph()["edgebuild.project.config"]


#: one job per module: a module that grows past this is doing more than one (docs/architecture.md)
MAX_MODULE_LINES = 600


def test_no_module_is_over_the_line_budget() -> None:
    long = sorted(f"{p.relative_to(PACKAGE.parent)}: {n} lines" for p in PACKAGE.rglob("*.py")
                  if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES)
    assert not long, f"split these by job (at most {MAX_MODULE_LINES} lines each):\n" + "\n".join(long)


#: one room per job: a folder that holds more modules than this is several jobs (docs/architecture.md)
MAX_FOLDER_MODULES = 15


def crowded_folders(package: Path) -> list[str]:
    """Each folder under ``package`` holding more than MAX_FOLDER_MODULES modules (``__init__.py`` not counted)."""
    folders = {p.parent for p in package.rglob("*.py")}
    counts = {folder: sum(1 for p in folder.glob("*.py") if p.name != "__init__.py") for folder in folders}
    return sorted(f"{folder.relative_to(package.parent)}: {n} modules" for folder, n in counts.items()
                  if n > MAX_FOLDER_MODULES)


def test_no_package_folder_holds_more_than_the_module_budget() -> None:
    crowded = crowded_folders(PACKAGE)
    assert not crowded, (f"split these by job into sub-packages (at most {MAX_FOLDER_MODULES} modules each):\n"
                         + "\n".join(crowded))


def test_the_folder_check_finds_a_crowded_folder(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "small").mkdir(parents=True)
    for name in ["__init__.py", *(f"m{i}.py" for i in range(MAX_FOLDER_MODULES + 1))]:
        (package / name).write_text("")
    (package / "small" / "__init__.py").write_text("")
    (package / "small" / "a.py").write_text("")
    assert crowded_folders(package) == [f"pkg: {MAX_FOLDER_MODULES + 1} modules"]

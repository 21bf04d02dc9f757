"""The layering of ARCHITECTURE.md, checked on the source: the import graph between files.

Every ``import`` and ``from ... import`` of the ``rescorer`` package (the one installed import
name; the models and the export are its subpackages) is read with :mod:`ast` (imports
inside functions too: a lazy import is still a dependency), resolved to the project file it
names, and the rules are asserted on the resulting graph:

* no cycle between files;
* the floor (``rescorer.core``) imports nothing else of the project;
* ``rescorer.lm_models`` and ``rescorer.export`` import nothing of ``rescorer`` but its floor
  (and the export, the models);
* ``rescorer.lm_models`` does not import ``rescorer.export``; a model family does not import another
family;
* nothing imports the CLI's entry point (``rescorer.cli.main``), and only the CLI imports
  its command modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from tests.paths import REPO

PACKAGES = ("rescorer",)
MODELS = "rescorer.lm_models"
EXPORT = "rescorer.export"
FLOOR = "rescorer.core"
FAMILIES = tuple(f"{MODELS}.{family}" for family in ("lstm", "fnlm", "cue", "lbl"))


def project_modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file of every module of the packages (``__init__``: the package)."""
    modules = {}
    for package in PACKAGES:
        for file in sorted((root / package).rglob("*.py")):
            parts = list(file.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = file
    return modules


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The project module that ``name`` (a module or a module's attribute) lives in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, file: Path, modules: Mapping[str, Path]) -> set[str]:
    """The project modules that ``module`` imports, anywhere in its file."""
    found: set[str] = set()
    is_package = file.name == "__init__.py"
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"), str(file))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # `from pkg import submodule` names the submodule; `from mod import attr` the module
            names = [f"{source}.{alias.name}" for alias in node.names] + [source]
            names = [n for n in names if n in modules] or [source]
        else:
            continue
        for name in names:
            target = _resolve(name, modules)
            if target is not None and target != module:
                found.add(target)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = project_modules(root)
    return {m: imports_of(m, f, modules) for m, f in modules.items()}


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(REPO)


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"b"}}) == []
    assert sorted(cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}})) == [
        ["a", "b"],
        ["c", "d"],
    ]


def test_graph_reads_lazy_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "rescorer"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from rescorer.c import thing\n")
    (pkg / "c.py").write_text("from .sub.b import f\nthing = 1\n")
    g = import_graph(tmp_path)
    assert g["rescorer.sub"] == {"rescorer.sub.b"}
    assert g["rescorer.sub.b"] == {"rescorer.c"}
    assert g["rescorer.c"] == {"rescorer.sub.b"}
    assert cycles(g) == [["rescorer.c", "rescorer.sub.b"]]


def test_no_import_cycles(graph: dict[str, set[str]]) -> None:
    assert len(graph) > 80  # the whole project was read
    assert cycles(graph) == []


def test_the_floor_stands_on_nothing(graph: dict[str, set[str]]) -> None:
    for module, targets in graph.items():
        if _in(module, FLOOR):
            outside = sorted(t for t in targets if not _in(t, FLOOR))
            assert outside == [], f"{module} imports {outside}"


@pytest.mark.parametrize("package", [MODELS, EXPORT])
def test_models_and_export_use_only_the_floor_of_rescorer(
    graph: dict[str, set[str]], package: str
) -> None:
    for module, targets in graph.items():
        if _in(module, package):
            above = sorted(
                t for t in targets if not (_in(t, package) or _in(t, MODELS) or _in(t, FLOOR))
            )
            assert above == [], f"{module} imports {above}"


def test_models_do_not_know_export_and_families_do_not_know_each_other(
    graph: dict[str, set[str]],
) -> None:
    for module, targets in graph.items():
        if not _in(module, MODELS):
            continue
        assert not any(_in(t, EXPORT) for t in targets), module
        family = next((f for f in FAMILIES if _in(module, f)), None)
        if family is None:
            # shared pieces of lm_models know no family (checkpoint finds them at run time)
            assert not any(_in(t, f) for t in targets for f in FAMILIES), module
        else:
            others = sorted(t for t in targets for f in FAMILIES if f != family and _in(t, f))
            assert others == [], f"{module} imports {others}"


def test_nothing_imports_the_entry_point(graph: dict[str, set[str]]) -> None:
    # `python -m rescorer` (rescorer/__main__.py) is the entry point under another name
    assert graph["rescorer.__main__"] == {"rescorer.cli.main"}
    for module, targets in graph.items():
        if module == "rescorer.__main__":
            continue
        assert "rescorer.cli.main" not in targets, module
        if not _in(module, "rescorer.cli"):
            assert not any(_in(t, "rescorer.cli") for t in targets), module

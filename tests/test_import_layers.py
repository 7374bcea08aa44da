"""The library's import graph points down only: no cycles, and the bottom modules import nothing above them.

Every module of the library (framework, problems, models, trainers) is parsed, not imported, and every
`import` statement in it counts, those inside functions included: a function-level import that closes a
cycle is a cycle all the same (it only moves the failure to run time). The rules:
- no import cycle among the library's modules (each one found is printed);
- framework/errors.py imports the standard library only; framework/settings.py the standard library and
  errors (its SettingsError is a UserError): no absl, no registry, nothing else of the project;
- framework/registry.py imports nothing of the project but errors (a plugin loader imports the built-ins
  by name, `import_builtins`);
- the Problem contract (framework/problem.py) imports neither absl flags, the CLI nor the registry.
"""
from __future__ import annotations

import ast
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root = package textrain
PACKAGE = "textrain"
LIBRARY = ("framework", "problems", "models", "trainers")


def _module_name(path: str) -> str:
    parts = os.path.relpath(path, ROOT)[:-len(".py")].split(os.sep)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([PACKAGE, *parts])


def library_modules() -> dict[str, str]:
    """{module name: file} of every module of the library."""
    found = {}
    for top in LIBRARY:
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    found[_module_name(path)] = path
    return found


def _imports(path: str, module: str) -> list[tuple[str, list[str]]]:
    """(base, names) of every import statement of `path`, at any depth of the file (functions included):
    `import a.b` is ("a.b", []), `from a import b, c` is ("a", ["b", "c"]) with relative bases resolved."""
    tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
    package = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[:len(package) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            found.append((base, [alias.name for alias in node.names]))
    return found


def imported_modules(path: str, module: str, modules: set[str]) -> set[str]:
    """The library modules `path` imports: `from a import b` reaches a.b when that is a module, else a.
    The module's own enclosing packages are left out: a package's __init__ that imports its members is
    being initialised when they import from it (`from textrain.problems import qa_postprocess`)."""
    ancestors = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
    found = set()
    for base, names in _imports(path, module):
        targets = [f"{base}.{n}" if f"{base}.{n}" in modules else base for n in names] or [base]
        for target in targets:
            while target and target not in modules:  # `import a.b.c` of a name inside a module
                target = target.rpartition(".")[0]
            if target and target != module and target not in ancestors:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    """{module: the library modules it imports}."""
    modules = library_modules()
    return {m: imported_modules(path, m, set(modules)) for m, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a list of modules, the first repeated at the end) per strongly connected component of
    more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return [_cycle_in(graph, set(c)) for c in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A concrete cycle through the component's first module (breadth-first back to it)."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in parents:
                    parents[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"no cycle in the component {sorted(component)}")


def test_the_cycle_finder_finds_a_cycle_and_ignores_a_chain():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_function_level_imports_count(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from textrain.framework import cli\n    import textrain.framework.records\n")
    modules = {"textrain.framework", "textrain.framework.cli", "textrain.framework.records", "textrain.m"}
    assert imported_modules(str(path), "textrain.m", modules) == {"textrain.framework.cli",
                                                                 "textrain.framework.records"}


def test_the_library_has_no_import_cycle():
    graph = import_graph()
    assert "textrain.framework.problem" in graph and len(graph) > 40  # the walk found the library
    cycles = find_cycles(graph)
    assert not cycles, "import cycles (imports inside functions count):\n" + "\n".join(
        " -> ".join(c) for c in cycles)


def _imported_tops(module: str) -> set[str]:
    """The top-level names of everything `module` imports (`absl`, `numpy`, `textrain`, `os` ...)."""
    return {base.split(".")[0] for base, _ in _imports(library_modules()[module], module) if base}


@pytest.mark.parametrize("module, allowed", [
    ("textrain.framework.errors", set()),
    ("textrain.framework.settings", {"textrain.framework.errors"}),
    ("textrain.framework.registry", {"textrain.framework.errors"}),
])
def test_the_bottom_modules_import_nothing_above_them(module, allowed):
    modules = library_modules()
    project = imported_modules(modules[module], module, set(modules))
    assert project <= allowed, f"{module} imports {sorted(project - allowed)} of the project"
    others = {t for t in _imported_tops(module) if t not in sys.stdlib_module_names and t != PACKAGE}
    assert not others, f"{module} imports {sorted(others)} (the standard library only)"


def test_the_problem_contract_imports_no_flags_cli_or_registry():
    modules = library_modules()
    module = "textrain.framework.problem"
    reached = imported_modules(modules[module], module, set(modules))
    above = {"textrain.framework.flags", "textrain.framework.cli", "textrain.framework.registry"}
    assert not reached & above, f"{module} imports {sorted(reached & above)}"
    assert not {base for base, _ in _imports(modules[module], module) if base.startswith("absl")}


# ------------------------------------------------------------------------- what docs/DESIGN.md states
DESIGN = os.path.join(ROOT, "docs", "DESIGN.md")


def _design_section(number: int) -> str:
    text = open(DESIGN, encoding="utf-8").read()
    start = text.index(f"\n## {number}. ")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def design_ranks() -> dict[str, int]:
    """{package: rank} from the table in DESIGN.md §2."""
    rows = re.findall(r"^\s*\|\s*(\w+)\s*\|\s*(\d+)\s*\|\s*$", _design_section(2), flags=re.M)
    return {package: int(rank) for package, rank in rows}


def test_design_ranks_cover_the_library():
    assert set(design_ranks()) == set(LIBRARY)


def against_ranks(graph: dict[str, set[str]], ranks: dict[str, int]) -> list[str]:
    """The imports of `graph` from a package to another of the same or a higher rank."""
    found = []
    for module, imported in graph.items():
        package = module.split(".")[1]
        for other in imported:
            target = other.split(".")[1]
            if target != package and ranks[target] >= ranks[package]:
                found.append(f"{module} -> {other} ({package} {ranks[package]}, {target} {ranks[target]})")
    return sorted(found)


def test_imports_follow_the_ranks_design_md_states():
    against = against_ranks(import_graph(), design_ranks())
    assert not against, "imports against the ranks of docs/DESIGN.md §2:\n" + "\n".join(against)


def test_the_rank_check_sees_imports_upwards_and_sideways():
    ranks = {"trainers": 3, "models": 2, "problems": 2, "framework": 1}
    graph = {"textrain.models.m": {"textrain.trainers.run", "textrain.framework.errors", "textrain.models.base"},
             "textrain.problems.p": {"textrain.models.bert"}, "textrain.trainers.t": {"textrain.models.bert"}}
    assert [line.split(" (")[0] for line in against_ranks(graph, ranks)] == [
        "textrain.models.m -> textrain.trainers.run", "textrain.problems.p -> textrain.models.bert"]


def test_every_module_is_named_in_design_md_layout():
    layout = _design_section(3)
    unnamed = [os.path.relpath(path, ROOT) for module, path in library_modules().items()
               if not path.endswith("__init__.py")
               and not re.search(rf"\b{re.escape(module.rsplit('.', 1)[1])}(\.py)?\b", layout)]
    assert not unnamed, "name these modules in docs/DESIGN.md §3 (Layout): " + ", ".join(sorted(unnamed))

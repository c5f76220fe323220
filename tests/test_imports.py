"""The package's own imports, read from its source: no import circle, and the layers of
../shared/docs/architecture.md kept where they exist (the judge below the policies, the policies
below the evaluator, the CLIs and the controller).

The graph counts every import statement wherever it stands (module level or inside a function:
a deferred import hides a circle from the interpreter, not from a reader), resolves relative
imports, and counts ``from ai4dl.x import y`` as importing ``ai4dl.x.y`` when y is a submodule.
It does not add the implicit import of a module's parent packages: Python runs a package's
``__init__`` before its submodules whatever they import, so that edge is no design choice.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

OPERATOR = Path(__file__).resolve().parents[1] / "operator"

#: The rules the judge applies, in their own folder below it: modules that import nothing from
#: the package themselves (the safety chain every replay applies; the reported shares of windows
#: at risk; the workload profile's hold, which the safety chain keeps).
JUDGE_MAY_IMPORT = {"ai4dl.rules.safety", "ai4dl.rules.objectives",
                    "ai4dl.rules.workload_profile"}
#: What no policy module may reach, directly or through others: the layers above the policies.
ABOVE_THE_POLICIES = ("ai4dl.evaluation", "ai4dl.cli", "ai4dl.controller")


def modules_of(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of ``package`` under ``root``."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (see the module docstring), self excluded."""
    modules = modules_of(root, package)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [source] + [f"{source}.{a.name}" for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components (Tarjan), each sorted, in no particular order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One import circle through the component's first module, as a path that returns to it
    (what a failure prints: the imports to look at)."""
    inside = set(component)
    start = component[0]
    # breadth-first from start's successors back to start, inside the component
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & inside):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, start]
                if w not in previous:
                    previous[w] = v
                    nxt.append(w)
        frontier = nxt
    raise ValueError(f"{component} is not a circle")


def circles(graph: dict[str, set[str]]) -> list[str]:
    """One line per import circle: its modules as a path."""
    return [" -> ".join(a_cycle(graph, c)) for c in strongly_connected(graph) if len(c) > 1]


def room(module: str) -> str:
    """A module's room: its folder (or module) at the package's first level."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def room_graph(graph: dict[str, set[str]]) -> tuple[dict[str, set[str]], dict]:
    """Room -> the rooms it imports, and (room, room) -> one module import behind that edge
    (what a failure names)."""
    rooms: dict[str, set[str]] = {}
    behind: dict[tuple[str, str], tuple[str, str]] = {}
    for a, targets in graph.items():
        rooms.setdefault(room(a), set())
        for b in sorted(targets):
            ra, rb = room(a), room(b)
            if ra != rb:
                rooms[ra].add(rb)
                behind.setdefault((ra, rb), (a, b))
    return rooms, behind


def room_circles(graph: dict[str, set[str]]) -> list[str]:
    """One line per circle between rooms, each step with the import that makes it."""
    rooms, behind = room_graph(graph)
    out = []
    for path in (a_cycle(rooms, c) for c in strongly_connected(rooms) if len(c) > 1):
        out.append("; ".join(f"{ra} -> {rb} ({' imports '.join(behind[(ra, rb)])})"
                             for ra, rb in zip(path, path[1:])))
    return out


def reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in graph[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(OPERATOR, "ai4dl")


# ----------------------------------------------------------------------------- the package
def test_the_package_has_no_import_circle(graph):
    assert len(graph) > 40, sorted(graph)     # the walk found the package, not an empty dir
    found = circles(graph)
    assert not found, "import circles (module -> module it imports):\n" + "\n".join(found)


def test_the_package_folders_import_one_way(graph):
    # the layers as folders (../shared/docs/architecture.md): rules below the judge, the judge
    # below the policies, serving from a PhaseModel spec above the CRD models and the
    # policies, adapters above what they feed; no folder imports one that imports it back
    rooms, _ = room_graph(graph)
    assert {"rules", "judge", "policy", "serving", "crd_spec", "sources", "evaluation",
            "controller"} <= set(rooms)
    found = room_circles(graph)
    assert not found, "folder circles (folder -> folder it imports):\n" + "\n".join(found)


def test_the_judge_imports_no_policy_only_the_rules_below_it(graph):
    assert not {m for m in graph["ai4dl.judge"] if m.startswith("ai4dl.policy")}
    rules = {m for m in graph["ai4dl.judge"] if m.startswith("ai4dl.rules")}
    assert rules == JUDGE_MAY_IMPORT, sorted(rules ^ JUDGE_MAY_IMPORT)
    for leaf in JUDGE_MAY_IMPORT:      # leaves indeed: they pull nothing else in
        assert graph[leaf] == set(), (leaf, sorted(graph[leaf]))


def test_the_policies_and_auto_use_the_judge_and_the_evaluator_orchestrates_above_it(graph):
    # the edges this layering is about, so that a rename cannot make the tests above vacuous
    assert "ai4dl.judge" in graph["ai4dl.policy.auto"]
    assert {"ai4dl.judge", "ai4dl.policy.auto"} <= graph["ai4dl.evaluation.evaluate"]
    assert "ai4dl.policy.running" in graph["ai4dl.policy.online"]
    assert "ai4dl.policy.running" in graph["ai4dl.policy.headroom"]


@pytest.mark.parametrize("above", ABOVE_THE_POLICIES)
def test_no_policy_reaches_a_layer_above_the_policies(graph, above):
    offenders = {m: sorted(r for r in reaches(graph, m)
                           if r == above or r.startswith(above + "."))
                 for m in graph if m.startswith("ai4dl.policy")}
    offenders = {m: r for m, r in offenders.items() if r}
    assert not offenders, offenders


def test_the_phase_method_reaches_nothing_above_it(graph):
    # ai4dl.method is the pure core every other layer builds on: it imports only itself and the
    # package's errors (no policy, evaluator, report, recorder, CLI or controller)
    method = {m for m in graph if m == "ai4dl.method" or m.startswith("ai4dl.method.")}
    assert {"ai4dl.method.traces", "ai4dl.method.crbm", "ai4dl.method.model"} <= method
    outside = {r for m in method for r in reaches(graph, m) if r not in method}
    assert outside <= {"ai4dl.errors"}, sorted(outside)


def test_the_running_statistics_import_nothing_from_the_package(graph):
    # their one owner, below every policy that serves from them
    assert graph["ai4dl.policy.running"] == set()
    assert "ai4dl.policy.online" not in graph["ai4dl.policy.headroom"]


# ----------------------------------------------------------------------------- a reader's house
#: The longest a function may be (``def`` to its last line, docstring included), and how many
#: may be past the reading length (issue 46: split the long ones along their seams).
LONGEST, READING_LENGTH, PAST_READING_LENGTH = 120, 80, 5


def _functions(root: Path):
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(root), node


def test_functions_a_reader_can_hold():
    lengths = {f"{p}:{n.lineno} {n.name}": n.end_lineno - n.lineno + 1
               for p, n in _functions(OPERATOR / "ai4dl")}
    assert len(lengths) > 500                       # the walk found the package's functions
    too_long = {k: v for k, v in lengths.items() if v >= LONGEST}
    assert not too_long, too_long
    long_ = {k: v for k, v in lengths.items() if v >= READING_LENGTH}
    assert len(long_) <= PAST_READING_LENGTH, long_


def test_no_private_name_is_imported_from_another_module():
    found = []
    for path in sorted((OPERATOR / "ai4dl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ai4dl"):
                found += [f"{path.relative_to(OPERATOR)}: {node.module}.{a.name}"
                          for a in node.names if a.name.startswith("_")
                          and not a.name.startswith("__")]
    assert not found, found


def passed_on_names(root: Path, package: str, readers: list[Path]) -> list[str]:
    """``from M import N`` in any of ``readers`` where the module M (not a package's
    ``__init__``, which presents its package) only imports N itself: the name is passed on, and
    a reader of M cannot find it there."""
    modules = modules_of(root, package)
    imported: dict[str, set[str]] = {}
    for name, path in modules.items():
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        imported[name] = {a.asname or a.name for node in tree.body
                          if isinstance(node, ast.ImportFrom) for a in node.names}
    found = []
    for path in readers:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module in imported:
                found += [f"{path.name}:{node.lineno} {node.module}.{a.name}" for a in node.names
                          if a.name in imported[node.module]
                          and f"{node.module}.{a.name}" not in modules]
    return found


def test_no_module_passes_on_names_it_only_imports():
    root = OPERATOR.parent
    readers = [p for d in ("operator/ai4dl", "tests", "bench", "e2e", "docs/results")
               for p in sorted((root / d).rglob("*.py"))]
    assert len(readers) > 200
    assert passed_on_names(OPERATOR, "ai4dl", readers) == []


def test_a_name_passed_on_is_found(tmp_path):
    _package(tmp_path, {
        "pkg/__init__.py": "from pkg.a import thing\n",        # a package's face: allowed
        "pkg/a.py": "thing = 1\n",
        "pkg/b.py": "from pkg.a import thing\n\nother = thing\n",
        "pkg/c.py": "from pkg.b import other, thing\nfrom pkg import thing as t\n",
    })
    assert passed_on_names(tmp_path, "pkg", [tmp_path / "pkg/c.py"]) == ["c.py:1 pkg.b.thing"]


#: The optional extras (pyproject.toml's optional-dependencies: what the operator's image lacks
#: and what is heavy to import): the one reason an import may stand inside a function.
OPTIONAL_EXTRAS = {"torch", "sklearn", "matplotlib", "tqdm", "pyarrow", "pynvml", "distributed",
                   "dask"}
#: Deferred imports kept for another reason, each said here and beside the import.
DEFERRED_ON_PURPOSE = {
    # the `ai4dl` command installs its Ctrl-C and missing-extra handling before any import
    "ai4dl/command.py",
    # `import ai4dl` / `import ai4dl.io` cost no numpy and no model: their names load on first use
    "ai4dl/__init__.py", "ai4dl/io/__init__.py",
}


def _imports(path: Path, here: str, modules: dict[str, Path]):
    """(statement, in a function?, the package modules it names, the outside top-level names)."""
    tree = ast.parse(path.read_text(), str(path))
    in_function = {id(n) for f in ast.walk(tree)
                   if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names = [source] + [f"{source}.{a.name}" for a in node.names]
        else:
            continue
        inside = {n for n in names if n in modules}
        outside = {n.split(".")[0] for n in names if n.split(".")[0] not in (
            "ai4dl", *modules)} if not inside else set()
        yield node, id(node) in in_function, inside, outside


def deferred_without_reason(root: Path, package: str) -> list[str]:
    """Imports inside functions that reach no optional extra, directly or through the
    module-level imports of what they import (outside ``DEFERRED_ON_PURPOSE``)."""
    modules = modules_of(root, package)
    top: dict[str, set[str]] = {m: set() for m in modules}
    deferred = []
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, inside_function, inside, outside in _imports(path, here, modules):
            if inside_function:
                deferred.append((path, node.lineno, inside, outside))
            else:
                top[name] |= inside | {f"<{o}>" for o in outside}

    def heavy(targets: set[str]) -> bool:
        seen, todo = set(), list(targets)
        while todo:
            t = todo.pop()
            if t.strip("<>") in OPTIONAL_EXTRAS:
                return True
            if t not in seen and t in top:
                seen.add(t)
                todo += top[t] | {p for p in modules if t.startswith(p + ".")}
        return False

    return [f"{p.relative_to(root)}:{line}" for p, line, inside, outside in deferred
            if str(p.relative_to(root)) not in DEFERRED_ON_PURPOSE
            and not (outside & OPTIONAL_EXTRAS) and not heavy(inside)]


def test_imports_stand_at_the_top_unless_an_optional_extra_is_the_reason():
    assert deferred_without_reason(OPERATOR, "ai4dl") == []


def test_a_deferred_import_without_reason_is_found(tmp_path):
    _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/fit.py": "import torch\n",
        "pkg/plain.py": "import json\n",
        "pkg/use.py": ("def a():\n    import torch\n"          # an extra: allowed
                       "def b():\n    from pkg import fit\n"   # reaches one: allowed
                       "def c():\n    from pkg.plain import json\n"
                       "def d():\n    import yaml\n"),
    })
    assert deferred_without_reason(tmp_path, "pkg") == ["pkg/use.py:6", "pkg/use.py:8"]


def test_a_policy_name_is_written_in_at_most_two_package_files():
    # a policy declares itself once (ai4dl.policy.registry); every list reads the catalogue,
    # and the oracle's name is the judge's (ai4dl.judge.ORACLE). Not counted: "auto" and
    # "phase", which are also ordinary words of the package (--device auto, --phases auto, a
    # feature's phase).
    from ai4dl.policy import catalog

    names = [n for n in catalog.names() if n not in ("auto", "phase")]
    assert {"peak-risk", "adaptive-max", "oracle"} <= set(names)
    files: dict[str, set[str]] = {n: set() for n in names}
    for path in sorted((OPERATOR / "ai4dl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in files:
                files[node.value].add(str(path.relative_to(OPERATOR)))
    assert all(len(f) <= 2 for f in files.values()), {n: sorted(f) for n, f in files.items()
                                                       if len(f) > 2}


# ----------------------------------------------------------------------------- the helpers
def _package(root: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(root, "pkg")


def test_a_circle_through_a_function_level_import_is_found(tmp_path):
    graph = _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg import b\n",
        "pkg/sub/__init__.py": "",
        # relative, inside a function, and the submodule named in the from-list
        "pkg/sub/c.py": "def late():\n    from .. import a\n",
        "pkg/b.py": "import os\nfrom pkg.sub import c\n",
        "pkg/leaf.py": "import pkg.a\n",
    })
    assert graph["pkg.a"] == {"pkg", "pkg.b"}
    assert graph["pkg.b"] == {"pkg.sub", "pkg.sub.c"}
    assert graph["pkg.sub.c"] == {"pkg", "pkg.a"}
    assert graph["pkg.leaf"] == {"pkg.a"}
    assert sorted(c for c in strongly_connected(graph) if len(c) > 1) == [
        ["pkg.a", "pkg.b", "pkg.sub.c"]]
    assert circles(graph) == ["pkg.a -> pkg.b -> pkg.sub.c -> pkg.a"]
    assert "pkg.a" in reaches(graph, "pkg.leaf") and "pkg.leaf" not in reaches(graph, "pkg.a")


def test_a_folder_circle_is_found_and_named_by_its_imports(tmp_path):
    graph = _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low/__init__.py": "",
        "pkg/low/a.py": "from pkg.high import b\n",      # the low folder reaching up
        "pkg/high/__init__.py": "",
        "pkg/high/b.py": "x = 1\n",
        "pkg/high/c.py": "from pkg.low import a\n",
    })
    assert circles(graph) == []                          # no module circle...
    assert room_circles(graph) == [                      # ...but the folders form one
        "high -> low (pkg.high.c imports pkg.low); low -> high (pkg.low.a imports pkg.high)"]


def test_a_package_without_a_circle_has_none(tmp_path):
    graph = _package(tmp_path, {
        "pkg/__init__.py": "from pkg import a\n",
        "pkg/a.py": "from pkg.b import thing\n",
        "pkg/b.py": "thing = 1\nimport json\n",
    })
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": set()}
    assert circles(graph) == []
    assert sorted(strongly_connected(graph)) == [["pkg"], ["pkg.a"], ["pkg.b"]]

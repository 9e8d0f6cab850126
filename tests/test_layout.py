"""harness/'s layout (issue 42, item 2), read statically (ast: no subprocess, no torch): no import circle,
no file over MAX_LINES, no sys.path edit outside tests/conftest.py, a one-line docstring on every package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HARNESS = REPO / "harness"
MAX_LINES = 350
# Where sys.path may change: tests/conftest.py (it takes the project root off, for `python -m pytest`), and
# the worker's one function that puts folders first as an interpreter without -I would have them: the
# candidate's own folder and home (a script's folder is first on its sys.path) and PYTHONPATH's folders
# (harness/worker/imports.py import_first; the worker runs isolated, -I, inside the sandbox).
SYS_PATH_OK = {"tests/conftest.py": None, "harness/worker/imports.py": "import_first"}
CHECKED_FOR_SYS_PATH = ("harness", "scripts", "targets", "agent", "tests")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def harness_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(HARNESS.rglob("*.py")) if "__pycache__" not in p.parts}


def imported(tree: ast.AST, modules: dict[str, Path]) -> set[str]:
    """The harness modules a module imports, at any depth (a function's import counts as much)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                     for a in node.names]
        else:
            continue
        out |= {n for n in names if n in modules}
    return out


def import_graph() -> dict[str, set[str]]:
    modules = harness_modules()
    return {name: imported(ast.parse(path.read_text()), modules) - {name} for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected component of more than one module (Tarjan), as one circle found in it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(circle(graph, set(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def circle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One circle through a component: a shortest path back to its first module."""
    start = min(component)
    paths = {start: [start]}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph[v] & component):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                todo.append(w)
    return sorted(component)


def test_no_import_circle():
    found = cycles(import_graph())
    assert not found, "import circles in harness/: " + "; ".join(" -> ".join(c) for c in found)


def test_the_circle_finder_finds_one():
    """The check itself: a circle of three is named in order, a chain is not one."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_file_over_the_limit():
    over = {p.relative_to(REPO).as_posix(): n for p in harness_modules().values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not over, f"over {MAX_LINES} lines: {over}"


def sys_path_edits(path: Path, allowed_in: str | None = None) -> list[int]:
    """The lines that change sys.path: an assignment to it or a slice of it, or a call of a method
    that changes it (append, insert, extend, remove, pop, clear, `+=`), but for those in the function
    `allowed_in` (one line at most: a second is reported)."""
    try:
        tree = ast.parse(path.read_text())
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    allowed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == allowed_in:
            allowed = {n.lineno for n in ast.walk(node) if hasattr(n, "lineno")}

    def is_sys_path(node: ast.AST) -> bool:
        while isinstance(node, ast.Subscript):
            node = node.value
        return (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
                and node.value.id in ("sys", "_sys"))

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            if any(is_sys_path(t) for t in targets):
                lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_sys_path(node.func.value)
              and node.func.attr in ("append", "insert", "extend", "remove", "pop", "clear")):
            lines.append(node.lineno)
    inside = sorted(set(lines) & allowed)
    return sorted(set(lines) - set(inside[:1]))


def test_no_sys_path_edit():
    found = []
    for top in CHECKED_FOR_SYS_PATH:
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if "__pycache__" in path.parts or (rel in SYS_PATH_OK and SYS_PATH_OK[rel] is None):
                continue
            found += [f"{rel}:{n}" for n in sys_path_edits(path, SYS_PATH_OK.get(rel))]
    assert not found, "sys.path edited (install the package: pip install -e .): " + ", ".join(found)


def test_the_sys_path_check_sees_each_form():
    forms = ["sys.path.append('x')", "sys.path.insert(0, 'x')", "sys.path[:0] = ['x']", "sys.path[:] = []",
             "sys.path = []", "sys.path += ['x']", "_sys.path.extend(['x'])", "del sys.path[0]"]
    for form in forms:
        assert sys_path_edits_of(form) == [1], form
    assert sys_path_edits_of("print(sys.path); x = list(sys.path)") == []
    # the allowed function: its one line passes, a second is reported, and so is the same line elsewhere
    two = "def import_first(f):\n    sys.path[:0] = f\n    sys.path.append('x')\nsys.path.insert(0, 'y')\n"
    assert sys_path_edits_of(two, "import_first") == [3, 4]
    assert sys_path_edits_of(two) == [2, 3, 4]


def sys_path_edits_of(source: str, allowed_in: str | None = None) -> list[int]:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py") as f:
        f.write(source)
        f.flush()
        return sys_path_edits(Path(f.name), allowed_in)


@pytest.mark.parametrize("package", sorted(p.parent.relative_to(REPO).as_posix() for p in HARNESS.rglob("__init__.py")
                                           if "__pycache__" not in p.parts))
def test_every_package_says_what_it_owns(package):
    doc = ast.get_docstring(ast.parse((REPO / package / "__init__.py").read_text()))
    assert doc and len(doc.strip().splitlines()) == 1, f"{package}/__init__.py: a one-line docstring, what it owns"

"""The shape of the production code, measured from its source: module and function
sizes, and import circles (function-level imports counted). What tests/test_code_shape.py
holds the code to; `python -m tests.code_shape` prints where it stands.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agentops", "runs", "builtin_agents", "sandbox")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 40


@dataclass(frozen=True)
class Module:
    name: str
    path: Path

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


def modules(root: Path = ROOT, packages=PACKAGES) -> dict[str, Module]:
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root)
            if "migrations" in relative.parts:
                continue
            parts = list(relative.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = Module(".".join(parts), path)
    return found


def long_modules(known: dict[str, Module] | None = None) -> list[tuple[str, int]]:
    """(module, lines) of modules over MAX_MODULE_LINES."""
    out = []
    for module in (known or modules()).values():
        lines = len(module.path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            out.append((module.name, lines))
    return sorted(out, key=lambda item: -item[1])


def long_functions(known: dict[str, Module] | None = None) -> list[tuple[str, int]]:
    """(module:qualname, lines) of functions over MAX_FUNCTION_LINES (a function's lines
    from its `def` to its last line, its docstring included)."""
    out = []
    for module in (known or modules()).values():
        tree = ast.parse(module.path.read_text())
        for qualname, node in _functions(tree):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                out.append((f"{module.name}:{qualname}", lines))
    return sorted(out, key=lambda item: -item[1])


def _functions(tree, prefix=""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{node.name}", node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")


def imports(known: dict[str, Module] | None = None) -> dict[str, set[str]]:
    """module -> the project modules it imports, anywhere in it (functions included)."""
    known = known or modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, module in known.items():
        tree = ast.parse(module.path.read_text())
        package = name if module.is_package else name.rpartition(".")[0]
        for node in ast.walk(tree):
            for target in _targets(node, package, known):
                if target != name:
                    graph[name].add(target)
    return graph


def _targets(node, package: str, known) -> list[str]:
    if isinstance(node, ast.Import):
        return [_owner(alias.name, known) for alias in node.names if _owner(alias.name, known)]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parent = package.split(".")
        parent = parent[:len(parent) - node.level + 1]
        base = ".".join(parent + ([base] if base else []))
    found = []
    for alias in node.names:
        full = f"{base}.{alias.name}" if base else alias.name
        owner = full if full in known else _owner(base, known)
        if owner:
            found.append(owner)
    return found


def _owner(name: str, known) -> str | None:
    """The project module `name` is, or is inside (a.b.c -> a.b if only a.b exists)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def circles(known: dict[str, Module] | None = None) -> list[list[str]]:
    """Strongly connected groups of modules (Tarjan): each is an import circle."""
    graph = imports(known)
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def main() -> int:
    for title, rows in ((f"modules over {MAX_MODULE_LINES} lines", long_modules()),
                        (f"functions over {MAX_FUNCTION_LINES} lines", long_functions())):
        print(f"{title}: {len(rows)}")
        for where, lines in rows:
            print(f"  {lines:5d}  {where}")
    groups = circles()
    print(f"import circles: {len(groups)}")
    for group in groups:
        print("  " + " <-> ".join(group))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""dbanon's own import graph, read from the source (ast, nothing imported): every `import` and
`from ... import` of a dbanon module, at module level and inside functions alike (a lazy import
that breaks a cycle at run time still ties two designs together). docs/architecture.md's package
table is rendered from it, and tests/test_architecture.py holds it to its rules: no cycle, few
modules at the top level, no module over MAX_LINES lines without a stated reason."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MAX_LINES = 900  # a module longer than this says why in its docstring ("Why one module")
REASON = "Why one module"


@dataclass
class Graph:
    """Modules (dotted name -> file) and the dbanon modules each one imports."""

    files: dict[str, Path]
    edges: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def cycles(self) -> list[list[str]]:
        """Strongly connected sets of two or more modules (Tarjan), each sorted."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on: set[str] = set()
        found: list[list[str]] = []

        def visit(v: str) -> None:  # recursion depth is bounded by the module count
            index[v] = low[v] = len(index)
            stack.append(v)
            on.add(v)
            for w in sorted(self.edges.get(v, ())):
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                part = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    part.append(w)
                    if w == v:
                        break
                if len(part) > 1:
                    found.append(sorted(part))

        for v in sorted(self.files):
            if v not in index:
                visit(v)
        return found

    def top_level(self) -> list[str]:
        """Modules directly in dbanon/ (not packages, not __init__)."""
        return sorted(m for m, f in self.files.items()
                      if m.count(".") == 1 and f.name != "__init__.py")  # fmt: skip

    def long_without_reason(self) -> list[tuple[str, int]]:
        """Modules over MAX_LINES lines whose docstring does not say why."""
        out = []
        for m, f in sorted(self.files.items()):
            text = f.read_text()
            lines = text.count("\n")
            if lines > MAX_LINES and REASON not in (ast.get_docstring(ast.parse(text)) or ""):
                out.append((m, lines))
        return out

    def packages(self) -> dict[str, set[str]]:
        """Package-level edges: dbanon.X -> the other dbanon.Y it imports from."""
        out: dict[str, set[str]] = defaultdict(set)
        for m, deps in self.edges.items():
            for d in deps:
                if package(d) != package(m):
                    out[package(m)].add(package(d))
        return out


def package(module: str) -> str:
    """dbanon.lifecycle.publish -> dbanon.lifecycle; a top-level module is its own."""
    return ".".join(module.split(".")[:2])


def _modules(root: Path) -> Iterator[tuple[str, Path]]:
    for f in sorted((root / "dbanon").rglob("*.py")):
        parts = list(f.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), f


def graph(root: Path) -> Graph:
    """The import graph of the package under `root` (the repository)."""
    g = Graph(dict(_modules(root)))

    def known(name: str) -> str | None:
        while name and name not in g.files:
            name = name.rpartition(".")[0]
        return name or None

    for m, f in g.files.items():
        package_file = f.name == "__init__.py"
        for node in ast.walk(ast.parse(f.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = m.split(".") if package_file else m.split(".")[:-1]
                    here = here[: len(here) - (node.level - 1)]
                    base = ".".join([*here, *([base] if base else [])])
                # `from pkg import module` names a module; `from module import name` the module
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in g.files else base
                           for a in node.names]  # fmt: skip
            for t in targets:
                hit = known(t) if t.startswith("dbanon") else None
                if hit and hit != m:
                    g.edges[m].add(hit)
    return g

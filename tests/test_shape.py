"""The code's shape: imports only run downwards (no circle among dbanon's modules, counting the
imports made for type checking, which are the first to grow one)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "dbanon"


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The dbanon modules NAME imports when it is loaded or type-checked: statements at module
    level, in `if` blocks (TYPE_CHECKING) and `try` blocks; imports inside functions run on call
    and are how a lower module reaches a registry above it."""
    found: set[str] = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]

    def visit(nodes: list[ast.stmt]) -> None:
        for n in nodes:
            if isinstance(n, ast.Import):
                found.update(a.name for a in n.names)
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    up = package[: len(package) - n.level + 1]
                    base = ".".join(up + ([base] if base else []))
                subs = {f"{base}.{a.name}" for a in n.names} & known.keys()
                found.update(subs or {base})
            elif isinstance(n, ast.If):
                visit(n.body)
                visit(n.orelse)
            elif isinstance(n, ast.Try):
                visit(n.body)
                for h in n.handlers:
                    visit(h.body)

    visit(ast.parse(path.read_text()).body)
    return (found & known.keys()) - {name}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def walk(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state and (found := walk(w)):
                return found
        state[v] = 2
        path.pop()
        return None

    for v in sorted(graph):
        if v not in state and (found := walk(v)):
            return found
    return None


def test_no_import_circle() -> None:
    known = modules()
    graph = {m: imports(m, p, known) for m, p in known.items()}
    assert "dbanon.lifecycle.publish" in graph["dbanon.api"]  # the walk sees imports at all
    found = cycle(graph)
    assert found is None, " -> ".join(found or [])


def test_the_walk_finds_a_circle() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_cli_names_no_method_and_no_experiment() -> None:
    """The CLI builds `publish` options, experiments and benches from their registries: no
    string in it is a method's, an experiment's or a bench's name (a command of its own, such
    as `check`, is the command's name)."""
    from dbanon import methods
    from dbanon.bench import runners
    from dbanon.cli import COMMANDS

    names = set(methods.methods()) | set(runners.experiments()) | set(runners.benches())
    names -= set(COMMANDS)
    paths = [PACKAGE / "cli.py"] if (PACKAGE / "cli.py").exists() else []
    paths += sorted((PACKAGE / "cli").glob("*.py")) if (PACKAGE / "cli").is_dir() else []
    assert paths
    found = [
        f"{path.name}:{node.lineno}: {node.value!r}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in names
    ]
    assert found == []


def test_every_command_is_found_under_its_own_name() -> None:
    """The CLI imports a command's module when the command runs (dbanon.cli.COMMANDS): each
    name leads to the command of that name, and `dbanon --help` lists every one."""
    import click
    from click.testing import CliRunner

    from dbanon.cli import COMMANDS, main

    ctx = click.Context(main)
    assert {name: main.get_command(ctx, name).name for name in COMMANDS} == {n: n for n in COMMANDS}
    listed = CliRunner().invoke(main, ["--help"]).output
    assert [n for n in COMMANDS if f"\n  {n} " not in listed] == []


def test_an_audit_starts_without_what_publishing_needs() -> None:
    """`dbanon check` is a process a cron or CI runs often, and its start-up is part of its cost
    (a third of it before commands were loaded on use): it must not import the publishing
    lifecycle, the methods' algorithms or the scheduler."""
    import subprocess
    import sys

    probe = (
        "import sys\nfrom click.testing import CliRunner\nfrom dbanon.cli import main\n"
        "CliRunner().invoke(main, ['check', '--help'], catch_exceptions=False)\n"
        "import dbanon.api, dbanon.models  # what the check runs\n"
        "print(' '.join(m for m in ('dbanon.lifecycle.publish', 'dbanon.lifecycle.schedule', "
        "'dbanon.methods.base', 'numpy') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert loaded == []

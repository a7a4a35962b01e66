"""Generated blocks in README.md and docs/: text that must not drift from code or measurements.

A block is the text between `<!-- generated: NAME -->` and `<!-- end: NAME -->` in a Markdown
file; NAME is a generator in this registry, which renders it from the method registry, the click
commands or a committed JSON/CSV file. `dbanon docs` rewrites every block in place; `dbanon docs
--check` (and a test) fails when any block differs from what its generator renders now, so a
figure in the text is always the one in the committed measurement.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from dbanon.docsgen.blocks import BLOCK, BLOCKS, ROOT, block, table
from dbanon.errors import DbanonError


def _load() -> None:
    """Register the experiments' and benchmarks' figure blocks (dbanon.docsgen.figures)."""
    from dbanon.docsgen import figures  # noqa: F401


def files(root: Path = ROOT) -> Iterator[Path]:
    """README.md and every Markdown file below docs/ that holds a block."""
    for path in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        if path.exists() and "<!-- generated: " in path.read_text():
            yield path


def render(text: str, where: str = "") -> str:
    """TEXT with every block regenerated (an unknown block name is an error, not kept as is)."""

    _load()

    def one(m: re.Match[str]) -> str:
        name = m["name"]
        if name not in BLOCKS:
            raise DbanonError(f"{where}: unknown generated block {name!r}")
        body = BLOCKS[name]().rstrip("\n") + "\n"
        return m.group(1) + body + m.group(4)

    return BLOCK.sub(one, text)


def stale(root: Path = ROOT) -> list[str]:
    """The files whose blocks differ from what their generators render now."""
    return [
        str(p.relative_to(root))
        for p in files(root)
        if render(p.read_text(), str(p)) != p.read_text()
    ]


def write(root: Path = ROOT) -> list[str]:
    """Regenerate every block in place; returns the files that changed."""
    changed = []
    for p in files(root):
        text = p.read_text()
        new = render(text, str(p))
        if new != text:
            p.write_text(new)
            changed.append(str(p.relative_to(root)))
    return changed


@block("methods")
def _methods() -> str:
    from dbanon import methods

    return methods.markdown_table()


@block("releases")
def _releases() -> str:
    from dbanon import methods

    return methods.releases_table()


@block("method-guides")
def _method_guides() -> str:
    """A guide per method: what it does and releases, what it promises, the attacker its
    guarantee holds against, and each option with its default and range."""
    from dbanon import methods
    from dbanon.models.specs import MODEL_KINDS

    out = []
    for m in methods.methods().values():
        d = m.describe()
        promises = ", ".join(f"{p} (`{MODEL_KINDS[p].option}`)" for p in d["promises"])
        lines = [f"### `{m.name}`", "", d["summary"], "",
                 f"- **Promises:** {promises or 'no class model; checks of its own'}",
                 f"- **Releases:** {d['releases']}", f"- **Holds against:** {d['attacker']}",
                 "- **Options:**" if d["options"] else "- **Options:** none"]  # fmt: skip
        for o in d["options"]:
            extra = [f"one of {', '.join(o['choices'])}" if o["choices"] else "",
                     f"range {o['range']}" if o["range"] else "",
                     f"default {o['default']}" if o["default"] is not None else ""]  # fmt: skip
            more = "; ".join(x for x in extra if x)
            lines.append(f"  - `{o['flag']}`: {o['help']}" + (f" ({more})" if more else ""))
        out.append("\n".join(lines))
    return "\n\n".join(out)


@block("sdgs-parameters")
def _sdgs_parameters() -> str:
    """β and k of (k,β)-SDGS for a grid of (ε, δ), computed by dbanon.models.dp itself: the
    table cannot drift from the calculation a publish runs."""
    from dbanon.models.dp import sdgs

    deltas = (1e-3, 1e-5, 1e-7)
    rows = []
    for eps in (0.01, 0.1, 0.5, 1.0, 1.5, 2.0, 3.0):
        got = [sdgs(eps, d) for d in deltas]
        rows.append([f"{eps:g}", f"{got[0].beta:.4f}", *(str(g.k) for g in got)])
    return table(["ε", "β = 1 - e^-ε", *(f"k at δ = {d:g}" for d in deltas)], rows)


@block("cli")
def _cli() -> str:
    """Every command's --help, at a fixed width so the text does not depend on the terminal."""
    import click

    from dbanon.cli import main

    out: list[str] = []

    def walk(cmd: click.Command, path: list[str], parent: click.Context | None) -> None:
        ctx = click.Context(cmd, info_name=path[-1], parent=parent, terminal_width=100,
                            max_content_width=100)
        out.append(f"{'#' * min(len(path) + 1, 4)} `{' '.join(path)}`\n\n```text\n"
                   f"{cmd.get_help(ctx)}\n```\n")
        if isinstance(cmd, click.Group):
            for name in sorted(cmd.list_commands(ctx)):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(sub, [*path, name], ctx)

    walk(main, ["dbanon"], None)
    return "\n".join(out)


@block("swap")
def _swap() -> str:
    """The longest reader wait while a release is refreshed (docs/locking/, `dbanon bench swap`)."""
    rows = []
    for name, what in (("bench_swap_200000.json", "this code"),
                       ("bench_swap_200000_loaded.json", "this code, machine loaded"),
                       ("bench_swap_200000_before_735a797.json", "before (735a797)")):  # fmt: skip
        path = ROOT / "docs" / "locking" / name
        if not path.exists():
            continue
        d = json.loads(path.read_text())
        under = sum(r["longest_reader_wait_seconds"] < 0.1 for r in d["runs"])
        rows.append([what, f"{d['rows']:,}", str(len(d["runs"])),
                     f"{d['longest_reader_wait_seconds'] * 1000:.0f} ms",
                     f"{under} of {len(d['runs'])}",
                     f"{d['longest_lock_held_seconds'] * 1000:.0f} ms"])  # fmt: skip
    return table(["code", "rows", "refreshes", "longest reader wait", "refreshes under 100 ms",
                   "exclusive lock held at most"], rows)  # fmt: skip


@block("soak")
def _soak() -> str:
    """Refresh under churn (docs/refresh-soak/soak.json, `dbanon bench soak`): every method's
    loss at publish and after the last refresh, and the refreshes that succeeded."""
    d = json.loads((ROOT / "docs" / "refresh-soak" / "soak.json").read_text())
    rows = []
    for name, m in d["methods"].items():
        runs = [r for r in m["runs"] if "error" not in r]  # a failed step ends the method's run
        below = [r["composition"] for r in runs if r.get("composition")]
        rows.append([name, f"{len(runs) - 1} of {d['refreshes']}", f"{runs[0]['ncp']:.3f}",
                     f"{runs[-1]['ncp']:.3f}",
                     str(sum(c["rows_below_k"] + c["rows_below_l"]
                             + c.get("rows_below_categories", 0) for c in below))
                     if below else "not measured"])  # fmt: skip
    churn = d["churn"]
    head = (f"{d['rows']:,} rows, {d['refreshes']} refreshes, each after "
            + ", ".join(f"{v:.0%} {k}" for k, v in churn.items()) + ":\n\n")  # fmt: skip
    return head + table(["method", "refreshes that succeeded", "gcp at publish",
                          "gcp after the last", "persisting rows below the promise"],
                         rows)  # fmt: skip


@block("timings")
def _timings() -> str:
    """The README's two commands, timed on a fresh clone (docs/timings/readme.json)."""
    data = json.loads((ROOT / "docs" / "timings" / "readme.json").read_text())
    rows = [
        [t["what"], f"{t['seconds'] / 60:.1f} min" if t["seconds"] >= 90
         else f"{t['seconds']:.0f} s", t["machine"], t.get("date", "-")]
        for t in data["timings"]
    ]
    return table(["command", "took", "on", "measured"], rows) + (
        "\n\nMeasured by `python .ci/time_readme.py`, fresh clone.")


# The layers, bottom first: a package may import those before it (dbanon.docsgen.imports reads
# what each one does import; docs/architecture.md shows both).
LAYERS = (
    "dbanon.errors", "dbanon.db", "dbanon.core", "dbanon.models", "dbanon.metrics",
    "dbanon.algorithms", "dbanon.setlogic", "dbanon.methods", "dbanon.lifecycle",
    "dbanon.compare", "dbanon.api", "dbanon.data", "dbanon.demo", "dbanon.experiments",
    "dbanon.bench", "dbanon.docsgen", "dbanon.cli", "dbanon.__main__",
)  # fmt: skip


@block("packages")
def _packages() -> str:
    """Each package (or top-level module), bottom layer first: what it owns (its docstring's
    first sentence) and the dbanon packages it imports, as read from the source."""
    import ast

    from dbanon.docsgen.imports import graph

    g = graph(ROOT)
    edges = g.packages()
    rows = []
    for name in LAYERS:
        f = g.files[name]
        doc = (ast.get_docstring(ast.parse(f.read_text())) or "").split("\n\n")[0]
        first = " ".join(doc.split()).split(". ")[0].rstrip(".")
        modules = sum(1 for m in g.files if m.startswith(name + ".")) or 1
        uses = ", ".join(f"`{d.removeprefix('dbanon.')}`" for d in LAYERS if d in edges[name])
        rows.append([f"`{name.removeprefix('dbanon.')}`", str(modules), first, uses or "-"])
    return table(["package", "modules", "what it owns", "imports"], rows)


@block("upward-imports")
def _upward() -> str:
    """Imports against the layer order: each one a module's import of a later layer."""
    from dbanon.docsgen.imports import graph, package

    g = graph(ROOT)
    rank = {p: i for i, p in enumerate(LAYERS)}
    found = sorted(
        f"- `{m}` imports `{d}`"
        for m, deps in g.edges.items() for d in deps
        if package(m) in rank and package(d) in rank and rank[package(d)] > rank[package(m)]
    )  # fmt: skip
    return "\n".join(found) if found else "None."

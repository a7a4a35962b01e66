"""The tree shows the layers: dbanon's import graph (module level and inside functions) has no
cycle, few modules sit at the top level, and a module over 900 lines says why."""

from __future__ import annotations

from pathlib import Path

from dbanon.docsgen.imports import MAX_LINES, graph

ROOT = Path(__file__).resolve().parent.parent
TOP_LEVEL_AT_MOST = 12


def test_no_import_cycle_not_even_through_a_lazy_import() -> None:
    g = graph(ROOT)
    assert len(g.files) > 100 and sum(map(len, g.edges.values())) > 300  # the graph was read
    assert g.cycles() == []


def test_few_modules_at_the_top_level() -> None:
    top = graph(ROOT).top_level()
    assert 0 < len(top) <= TOP_LEVEL_AT_MOST, top


def test_a_long_module_says_why() -> None:
    assert graph(ROOT).long_without_reason() == [], f"over {MAX_LINES} lines, no stated reason"


def test_the_graph_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """A cycle closed only by an import inside a function, or by a relative import, is found."""
    pkg = tmp_path / "dbanon"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from dbanon.a import y\n")
    (pkg / "a" / "y.py").write_text("def f():\n    from . import x\n")
    (pkg / "top.py").write_text("import dbanon.a.x\n")
    g = graph(tmp_path)
    assert g.cycles() == [["dbanon.a.x", "dbanon.a.y"]]
    assert g.top_level() == ["dbanon.top"]
    (pkg / "a" / "y.py").write_text('"""' + "\n" * (MAX_LINES + 1) + '"""\n')
    assert graph(tmp_path).long_without_reason() == [("dbanon.a.y", MAX_LINES + 2)]

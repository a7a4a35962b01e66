"""Generated text cannot drift: every block in README.md and docs/ is what its generator renders
from the code and the committed measurements today."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from dbanon.cli import main
from dbanon.docsgen import generate as docgen
from dbanon.errors import DbanonError


def test_every_generated_block_is_current() -> None:
    assert docgen.stale() == [], "run `dbanon docs` and commit"


def test_check_fails_on_a_stale_block_and_write_repairs_it(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text("intro\n<!-- generated: methods -->\nold table\n<!-- end: methods -->\ntail\n")
    assert docgen.stale(tmp_path) == ["docs/page.md"]
    assert docgen.write(tmp_path) == ["docs/page.md"]
    text = page.read_text()
    assert "old table" not in text and "| `kmember` (default) |" in text
    assert text.startswith("intro\n") and text.endswith("tail\n")
    assert docgen.stale(tmp_path) == []


def test_an_unknown_block_is_an_error_not_kept(tmp_path: Path) -> None:
    with pytest.raises(DbanonError, match="unknown generated block 'nosuch'"):
        docgen.render("<!-- generated: nosuch -->\nx\n<!-- end: nosuch -->\n", "f.md")


def test_cli_reference_lists_every_command() -> None:
    text = (docgen.ROOT / "docs" / "cli.md").read_text()
    for name in main.list_commands(None):  # type: ignore[arg-type]
        assert f"`dbanon {name}`" in text, name
    out = CliRunner().invoke(main, ["docs", "--check"])
    assert out.exit_code == 0, out.output


FIGURE = re.compile(r"\d+\.\d{2,}|\d\s?(?:s|ms|MB|MiB|GB|%)(?!\w)")  # 0.25, 1.7 s, 12 %
BLOCK = re.compile(r"<!-- generated: ([\w-]+) -->.*?<!-- end: \1 -->", re.S)
FENCE = re.compile(r"```.*?```", re.S)


def test_no_table_of_figures_is_typed_by_hand() -> None:
    """A table row holding a measured figure (a decimal, seconds, MB, a share) lives in a
    generated block: typed by hand it drifts from the measurement (issue 21)."""
    pages = [docgen.ROOT / "README.md", *sorted((docgen.ROOT / "docs").rglob("*.md"))]
    typed = []
    for page in pages:
        if page.name in ("cli.md", "claims.md"):  # generated whole
            continue
        text = FENCE.sub("", BLOCK.sub("", page.read_text()))
        typed += [f"{page.name}: {line[:80]}" for line in text.splitlines()
                  if line.startswith("|") and FIGURE.search(line)]  # fmt: skip
    assert typed == [], typed


def test_a_figure_follows_its_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Change one measurement in a copy of the committed CSV: the block renders the new figure,
    so a page typed from the old one would be stale."""
    from dbanon.docsgen import figures as docfigures

    src = docgen.ROOT / "docs" / "kmember" / "results.csv"
    (tmp_path / "kmember").mkdir()
    rows = src.read_text().splitlines()
    head = rows[0].split(",")
    first = rows[1].split(",")
    first[head.index("total_il_height")] = "1234567.0"
    (tmp_path / "kmember" / "results.csv").write_text("\n".join([rows[0], ",".join(first),
                                                                  *rows[2:]]) + "\n")  # fmt: skip
    before = docfigures._kmember_paper()
    monkeypatch.setattr(docfigures, "DOCS", tmp_path)
    after = docfigures._kmember_paper()
    assert "1,234,567" in after and "1,234,567" not in before
    page = tmp_path / "page.md"
    page.write_text(f"<!-- generated: kmember-paper -->\n{before}\n<!-- end: kmember-paper -->\n")
    assert docgen.render(page.read_text()) != page.read_text()


def test_a_later_scale_run_replaces_its_methods_figures(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """floor_ROWS_*.json (a later run of some methods, with its own floor) replaces those
    methods' figures in the tables, and the text names the run and its floor."""
    import json

    from dbanon.docsgen import figures

    bench = tmp_path / "scale-bench"
    bench.mkdir()

    def run(floor: float, **ratios: float) -> dict:
        return {"rows": 100, "k": 2, "l": 2, "floor": {"seconds": floor, "write_seconds": 1,
                                                       "group_by_seconds": 1},
                "methods": {n: {"seconds": r * floor, "publish_seconds": r * floor,
                                "peak_rss_mb": 10, "floor_ratio": r, "timings": {},
                                "checked": {"holds": True}} for n, r in ratios.items()}}

    (bench / "floor_100.json").write_text(json.dumps(run(1.0, mondrian=8.0, anatomy=4.0)))
    (bench / "floor_100_later.json").write_text(json.dumps(run(3.0, mondrian=2.5)))
    monkeypatch.setattr(figures, "DOCS", tmp_path)
    _, rows = figures._floor_rows(100)
    assert {r["name"]: r["ratio"] for r in rows} == {"mondrian": 2.5, "anatomy": 4.0}
    assert "`mondrian`: a later run (floor_100_later.json, floor 3.00 s" in figures._later_said(100)
    # runs numbered by session: the tenth after the ninth, though "wave10" < "wave9" as text
    (bench / "floor_100_wave9.json").write_text(json.dumps(run(2.0, mondrian=3.5)))
    (bench / "floor_100_wave10.json").write_text(json.dumps(run(2.0, mondrian=1.5)))
    _, rows = figures._floor_rows(100)
    assert {r["name"]: r["ratio"] for r in rows}["mondrian"] == 1.5


def test_a_floor_each_run_shows_the_ratio_to_the_floor_just_before(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """A run made with --floor-each gets a column of each method's ratio to the floor measured
    just before it, beside the ratio to the run's first floor (which `met` still reads); a
    run without it has no such column."""
    import json

    from dbanon.docsgen import figures

    bench = tmp_path / "scale-bench"
    bench.mkdir()
    m = {"seconds": 6.0, "publish_seconds": 5.0, "peak_rss_mb": 10, "floor_ratio": 3.0,
         "timings": {}, "checked": {"holds": True}}  # fmt: skip
    run = {"rows": 100, "k": 2, "l": 2, "methods": {"mondrian": m},
           "floor": {"seconds": 2.0, "write_seconds": 1, "group_by_seconds": 1}}  # fmt: skip
    (bench / "floor_100.json").write_text(json.dumps(run))
    monkeypatch.setattr(figures, "DOCS", tmp_path)
    plain = figures._floor_table(100)
    assert "just before" not in plain and "| 3.0x |" in plain
    m |= {"near_floor_ratio": 2.4, "floor": {"seconds": 2.5}}
    (bench / "floor_100.json").write_text(json.dumps(run | {"floor_each": True}))
    table = figures._floor_table(100)
    assert "ratio to the floor measured just before it" in table
    assert "| 3.0x | 2.4x | <= 2x, 300 MiB | no |" in table

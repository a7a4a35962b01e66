"""Generated text cannot drift: every block in README.md and docs/ is what its generator renders
from the code and the committed measurements today."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dbanon import docgen
from dbanon.cli import main
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

"""Every committed CSV the claims are judged on was made by the code as it is now: its
provenance records the SHA-256 of the sources that determine its figures and of the CSV itself,
and the check recomputes them, naming the stale CSV and the changed file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dbanon.experiments import provenance
from dbanon.experiments.claims import CLAIMS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@pytest.mark.parametrize("name", sorted(provenance.EXPERIMENTS))
def test_every_csv_was_made_by_the_code_as_it_is(name: str) -> None:
    assert provenance.stale(DOCS, name) == []


def test_every_claim_is_judged_on_a_registered_csv() -> None:
    for c in CLAIMS:
        name, csv = provenance.owner(c.source)
        assert name in provenance.EXPERIMENTS, c.source
        assert csv in provenance.EXPERIMENTS[name].csvs, c.source


def _repo(tmp_path: Path, name: str) -> Path:
    """A copy of the sources experiment `name` is hashed over (outside any git repository)."""
    root = tmp_path / "repo"
    for p in provenance.EXPERIMENTS[name].sources:
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / p, root / p)
    return root


def test_the_check_names_the_stale_csv_and_the_changed_file(tmp_path: Path) -> None:
    root = _repo(tmp_path, "ina")
    docs = tmp_path / "docs"
    (docs / "ina").mkdir(parents=True)
    csv = docs / "ina" / "results.csv"
    csv.write_text("k,msec\n2,1.5\n")
    assert provenance.stale(docs, "ina", root) == [
        "docs/ina/results.csv has no provenance (docs/ina/provenance.json): re-run "
        "`dbanon experiment ina --out docs/ina`"
    ]
    provenance.write(docs / "ina", "ina", {"copies": 1}, root=root)
    assert provenance.stale(docs, "ina", root) == []
    # an algorithm the experiment runs changes: the CSV is stale, and the file is named
    algorithm = root / "dbanon" / "algorithms" / "ina.py"
    kept = algorithm.read_text()
    algorithm.write_text(kept + "\n# a change\n")
    assert provenance.stale(docs, "ina", root) == [
        "docs/ina/results.csv is stale: dbanon/algorithms/ina.py changed since the run "
        "(commit unknown)"
    ]
    algorithm.write_text(kept)
    assert provenance.stale(docs, "ina", root) == []
    # the CSV edited by hand (or copied from another run) is not the one recorded
    csv.write_text("k,msec\n2,1.4\n")
    assert provenance.stale(docs, "ina", root) == [
        "docs/ina/results.csv is not the file its provenance records (edited by hand, or "
        "written by another run)"
    ]


def test_a_file_added_to_the_registry_makes_the_csv_stale(tmp_path: Path) -> None:
    """A source the run did not record (the registry grew) is a change too."""
    root = _repo(tmp_path, "kmember")
    docs = tmp_path / "docs"
    (docs / "kmember").mkdir(parents=True)
    (docs / "kmember" / "results.csv").write_text("k\n2\n")
    path = provenance.write(docs / "kmember", "kmember", {}, root=root)
    record = path.read_text().replace('"dbanon/metrics/loss.py"', '"dbanon/metrics/other.py"')
    path.write_text(record)
    assert provenance.stale(docs, "kmember", root) == [
        "docs/kmember/results.csv is stale: dbanon/metrics/loss.py was not among the sources "
        "recorded"
    ]


def test_a_sub_folder_run_has_its_own_record() -> None:
    """The salary profiles are a second run of the cbg experiment, in docs/cbg/salary: its CSV
    belongs to that run's record, not the main one's."""
    assert provenance.owner("cbg/salary/results.csv") == ("cbg-salary", "results.csv")
    assert provenance.owner("cbg/results.csv") == ("cbg", "results.csv")
    with pytest.raises(KeyError):
        provenance.owner("nowhere/results.csv")

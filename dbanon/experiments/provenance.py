"""Which code made each committed CSV: a provenance file beside it, and the check that it is fresh.

An experiment's figures are only evidence for the code that made them. Each experiment writes
`provenance.json` into its folder after its CSVs: the commit it ran at, its settings, a SHA-256 of
each CSV, and a SHA-256 of each source file that determines its figures — the experiment module,
the algorithm and method modules it runs, the metrics it computes. Those files are listed here per
experiment (one registry), not the whole package, so a change to unrelated plumbing (the
lifecycle, the SQL of publish) does not make every CSV stale, while a change to anything that
moves a figure does. `stale()` recomputes the hashes and names the stale CSV and the changed
file (tests/test_provenance.py runs it over docs/).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the repository: sources are named relative to it
FILE = "provenance.json"


@dataclass(frozen=True)
class Experiment:
    csvs: tuple[str, ...]  # under its folder of docs/
    sources: tuple[str, ...]  # under the repository; what determines the figures
    folder: str = ""  # under docs/, when not the experiment's name (a second run's sub-folder)


def _pkg(*paths: str) -> tuple[str, ...]:
    return tuple(f"dbanon/{p}" for p in paths)


_LOSS = ("algorithms/base.py", "metrics/loss.py", "bench/methods.py")
_CBG = _pkg("experiments/cbg.py", "algorithms/cbg.py", "methods/cbg.py", "methods/cbg_rows.py",
            "methods/grouped_rows.py", "algorithms/mondrian.py",
            "methods/mondrian.py", "methods/anatomy.py", "models/crossbucket.py",
            "lifecycle/evaluate.py", "data/salary.py", "metrics/exposure.py")  # fmt: skip
EXPERIMENTS: dict[str, Experiment] = {
    "kmember": Experiment(("results.csv",), _pkg(
        "experiments/kmember.py", "algorithms/kmember.py", "algorithms/mondrian.py", *_LOSS)),
    "thetak": Experiment(("results.csv", "seeds.csv"), _pkg(
        "experiments/thetak.py", "experiments/stats.py", "algorithms/thetak.py",
        "algorithms/kmember.py", "models/thetak.py", "metrics/vulnerability.py",
        "data/hospital.py", *_LOSS)),
    "ina": Experiment(("results.csv", "baseline.csv", "copies.csv"), _pkg(
        "experiments/ina.py", "experiments/stats.py", "algorithms/ina.py",
        "metrics/clustering.py", "metrics/chameleon.py", "metrics/security.py")),
    "rfka": Experiment(("results.csv", "seeds.csv"), _pkg(
        "experiments/rfka.py", "experiments/stats.py", "methods/rfka.py", "methods/hamdist.py",
        "methods/projection.py", "algorithms/featuresel.py")),
    "cbg": Experiment(("results.csv",), _CBG),
    # The salary profiles compared (`--salaries flat,heaped`): a second run on a cut grid.
    "cbg-salary": Experiment(("results.csv",), _CBG, folder="cbg/salary"),
    "localanatomy": Experiment(("exposure.csv", "query_error.csv", "tcloseness.csv"), _pkg(
        "experiments/localanatomy.py", "algorithms/localanatomy.py", "algorithms/mondrian.py",
        "core/flags.py", "data/salary.py", "metrics/queries.py", "metrics/boxes.py",
        "metrics/personal.py")),
    "lag": Experiment(("results.csv", "exposure.csv"), _pkg(
        "experiments/lag.py", "algorithms/lag.py", "algorithms/localanatomy.py",
        "core/flags.py", "metrics/queries.py", "metrics/personal.py")),
    "dp": Experiment(("results.csv", "runs.csv"), _pkg(
        "experiments/dp.py", "experiments/stats.py", "methods/safepub.py", "models/dp.py",
        "algorithms/dpsearch.py", "methods/fulldomain.py", "setlogic/lattice.py",
        "metrics/loss.py", "metrics/queries.py", "experiments/rfka.py")),
}  # fmt: skip


def folder(name: str) -> str:
    """Experiment `name`'s folder under docs/."""
    return EXPERIMENTS[name].folder or name


def owner(source: str) -> tuple[str, str]:
    """The experiment and CSV of a claim's source ("cbg/salary/results.csv"): the experiment
    whose folder is the longest prefix of it."""
    for name in sorted(EXPERIMENTS, key=lambda n: -len(folder(n))):
        if source.startswith(folder(name) + "/"):
            return name, source[len(folder(name)) + 1:]
    raise KeyError(f"no experiment writes {source}")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def code_hashes(name: str, root: Path = ROOT) -> dict[str, str]:
    """Each registered source file of experiment `name` and its SHA-256, as they are now."""
    return {p: sha256(root / p) for p in EXPERIMENTS[name].sources}


def _git(root: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return ""


# The commit when the experiment started (this module is imported as it starts), not when it
# finished: a run takes long, and commits may land meanwhile.
_STARTED = _git(ROOT, "rev-parse", "HEAD")


def write(out_dir: str | Path, name: str, settings: Mapping[str, Any], *,
          note: str = "", root: Path = ROOT) -> Path:  # fmt: skip
    """Record, beside the CSVs just written to `out_dir`, the code and settings that made them.
    `note` says what a reader must know (a smaller setting than the paper's, say)."""
    out = Path(out_dir)
    spec = EXPERIMENTS[name]
    sources = code_hashes(name, root)
    dirty = _git(root, "status", "--porcelain", "--", *sources)
    record = {
        "experiment": name,
        "commit": (_STARTED if root == ROOT else _git(root, "rev-parse", "HEAD")) or "unknown",
        "uncommitted": sorted(line[3:] for line in dirty.splitlines()),
        "settings": dict(settings),
        "note": note,
        "csvs": {c: sha256(out / c) for c in spec.csvs if (out / c).is_file()},
        "sources": sources,
    }
    path = out / FILE
    path.write_text(json.dumps(record, indent=1, sort_keys=True, default=str) + "\n")
    return path


def read(docs: str | Path, name: str) -> dict[str, Any] | None:
    path = Path(docs) / folder(name) / FILE
    return json.loads(path.read_text()) if path.is_file() else None


def stale(docs: str | Path, name: str, root: Path = ROOT) -> list[str]:
    """Why experiment `name`'s committed CSVs under `docs` are not evidence for the code as it is
    now (an empty list: they are): no provenance, a CSV that is not the one recorded, or a
    source file changed, added to the registry or gone since the run."""
    where = folder(name)
    csvs = [c for c in EXPERIMENTS[name].csvs if (Path(docs) / where / c).is_file()]
    if not csvs:
        return []  # nothing committed, nothing judged from it (claims say "not testable")
    record = read(docs, name)
    if record is None:
        return [f"docs/{where}/{c} has no provenance (docs/{where}/{FILE}): re-run "
                f"`dbanon experiment {name.split('-')[0]} --out docs/{where}`"
                for c in csvs]  # fmt: skip
    out = []
    for c in csvs:
        if record["csvs"].get(c) != sha256(Path(docs) / where / c):
            out.append(f"docs/{where}/{c} is not the file its provenance records (edited by "
                       "hand, or written by another run)")  # fmt: skip
    then: dict[str, str] = record["sources"]
    for path, digest in code_hashes(name, root).items():
        if path not in then:
            why = "was not among the sources recorded"
        elif then[path] != digest:
            why = f"changed since the run (commit {record['commit'][:10]})"
        else:
            continue
        out += [f"docs/{where}/{c} is stale: {path} {why}" for c in csvs]
    return out

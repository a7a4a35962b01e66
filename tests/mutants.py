"""Mutation testing of the privacy gates and the checks: would the tests catch a broken one?

Run it from the repository root with the project's virtualenv, when no other test run of yours
is going (it runs one pytest session per mutant: 69 mutants, about 8 minutes on 2 cores):

    .venv/bin/python tests/mutants.py            # one line per mutant: killed or SURVIVED
    .venv/bin/python tests/mutants.py --json     # {"mutants": N, "survived": [names], ...}
    .venv/bin/python tests/mutants.py --list     # the mutants and the tests each runs
    .venv/bin/python tests/mutants.py --only gate-first-model,k-threshold

Each mutant is a one-line change of dbanon's code or SQL, the kind a real bug makes:
- the gate (verify only the first promised model; skip verification for each registered
  method; a method's checks that leave a promise out), the declared columns and the demo's
  own hierarchies;
- the checks of k, l (each kind), t (both grounds), alpha, p and theta, and the SQL functions
  lca() and k_anonymity() where they are defined now: the newest sql/ file that creates each
  (the test databases are made by running the copy's migrations, which read the copy's sql/,
  so a mutated file is what the tests query);
- the intersection guard: its measure of plausible rows and values (plain and per bucket)
  off by one or blind to earlier releases, a refusal that forgets k, l or (θ,k)'s spread, the
  values needed ignoring p, the spread's categories, θ and need_c;
- the sealed policy's diff check: a group that lost a row kept, a missing or joining side
  judged against k - 1 or l - 1 or not at all, full-domain's sealed batches ignoring l, a
  sealed refresh (full-domain's, the grouping methods') without the intersection guard;
- the identifying-column gate: its thresholds alone and together, the unique share it counts,
  a share the DBA set ignored, `check --release` skipping it.
They are applied one at a time in a scratch copy of the tree (a temporary directory; .venv and
.git are not copied, and the working tree is never written), where the relevant tests run
against the embedded server only (`-k "not pg15"`), stopping at the first failure (hypothesis
derandomised and without shrinking: one failing example suffices). The copy is imported
instead of the installed package: PYTHONPATH and the working directory point at it, its
sql/ and migrations/ sit where the package imports them from, and a guard plugin fails the run
unless dbanon, dbanon.sql and dbanon.migrations come from the copy. An unmutated run of every
selected test comes first and must pass.

A mutant survives when its tests still pass: a bug of that kind would go unnoticed. Exit status
0 when every mutant was killed, 1 when one survived, 2 when a run could not be judged (the
baseline failed, or pytest stopped with an error rather than a test failure). Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Where the package imports its SQL and migrations from (pyproject's package-dir mapping).
PACKAGE_DIRS = {"sql": "dbanon/sql", "migrations": "dbanon/migrations"}
IGNORED = (".venv", ".git", ".pytest_cache", ".ruff_cache", ".hypothesis", ".dbhome",
           "*.egg-info", "build", "dist")  # fmt: skip
GUARD = '''
"""Fail the session unless dbanon is imported from the mutated copy; a mutant needs one
failing example, not the smallest: hypothesis derandomised, without shrinking."""
import os
from pathlib import Path


def pytest_configure(config):
    import dbanon, dbanon.migrations, dbanon.sql
    from hypothesis import HealthCheck, Phase, settings

    root = Path(os.environ["DBANON_MUTANT_TREE"]).resolve()
    for module in (dbanon, dbanon.sql, dbanon.migrations):
        where = Path(module.__file__).resolve()
        if root not in where.parents:
            raise RuntimeError(f"{module.__name__} imported from {where}, not the copy {root}")
    settings.register_profile(
        "mutants", derandomize=True, database=None, deadline=None, report_multiple_bugs=False,
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
        suppress_health_check=list(HealthCheck),
    )
    settings.load_profile("mutants")
'''

GATE = ["tests/test_gate.py"]
MODELS = ["tests/test_hand_worked.py", "tests/test_models.py"]


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository root
    old: str  # must occur exactly once in the file
    new: str
    tests: tuple[str, ...]
    keyword: str | None = None  # a -k expression narrowing the tests

    def describe(self) -> str:
        return f"{self.path}: {self.old.strip()!r} -> {self.new.strip()!r}"


def gate_mutants() -> list[Mutant]:
    """The gate: the lifecycle's verify() and the checks each method names; the identifying-
    column gate, the declared columns and the demo's own hierarchies (issue 24)."""
    sys.path.insert(0, str(ROOT))
    from dbanon.methods import methods

    out = [
        Mutant(
            "gate-first-model", "dbanon/lifecycle/verify.py",
            "    checks = r.method.checks(r, built)\n",
            "    checks = r.method.checks(r, built)[:1]\n", tuple(GATE),
        ),
        Mutant(
            "gate-method-checks-first-model", "dbanon/methods/base.py",
            "return [model_check(m, target) for m in r.models]",
            "return [model_check(m, target) for m in r.models[:1]]", tuple(GATE),
        ),
        Mutant(
            "gate-anatomy-checks-consistency-only", "dbanon/methods/anatomy.py",
            'return [Check(model.name, diverse), Check("Anatomy QIT/ST", consistent)]',
            'return [Check("Anatomy QIT/ST", consistent)]', tuple(GATE),
        ),
    ]  # fmt: skip
    ident, released = "dbanon/lifecycle/identifying.py", ("tests/test_identifying.py",)
    out += [
        Mutant(
            "identifying-gate-skipped", "dbanon/lifecycle/verify.py",
            "figures.update(identifying.gate(conn, r, built))", "figures.update({})", released,
        ),
        Mutant(
            "identifying-share-threshold", ident,
            "        if shares[c] > limit:\n", "        if shares[c] > limit + 0.5:\n", released,
        ),
        Mutant(
            "identifying-together-skipped", ident,
            "    if together and (len(together) > 1 or read):\n",
            "    if together and len(together) > 99:\n", released,
        ),
        Mutant(
            "identifying-kept-without-qis", ident,
            "unique_share(conn, rel, [*read, *together])", "unique_share(conn, rel, together)",
            released,
        ),
        Mutant(
            "identifying-no-sensitive-warning", ident,
            "    if not r.method.sensitive_apart:\n", "    if False:\n", released,
        ),
        Mutant(
            "noise-releases-undeclared-columns", "dbanon/methods/perturbed.py",
            "return [c for c in cols if c in declared and c != r.key.name]",
            "return [c for c in cols if c != r.key.name]", released,
        ),
        Mutant(
            "demo-replaces-the-dbas-hierarchy", "dbanon/demo.py",
            'return f"demo_{dataset}_{name}"', "return name", ("tests/test_demo.py",),
        ),
    ]  # fmt: skip
    for name in methods():
        out.append(
            Mutant(
                f"gate-skip-{name}",
                "dbanon/lifecycle/verify.py",
                "    for check in checks:\n",
                f"    for check in (checks if r.method.name != {name!r} else []):\n",
                tuple(GATE),
                keyword=name,
            )
        )
    return out


def check_mutants() -> list[Mutant]:
    """The models' SQL checks and the SQL functions: each weakened by one change."""
    k = "dbanon/models/kanonymity.py"
    ld = "dbanon/models/ldiversity.py"
    tc = "dbanon/models/tcloseness.py"
    th = "dbanon/models/thetak.py"
    lca = "sql/0009_lca.sql"  # the live dbanon.lca()
    theta = (*GATE, "tests/test_hand_worked.py", "tests/test_thetak.py")
    models = tuple(MODELS)
    return [
        Mutant("k-threshold", k, 'failing=sql.SQL("n < {}")', 'failing=sql.SQL("n < {} - 1")',
               (*GATE, *models)),
        Mutant("k-ignores-weights", k, 'per_class={"n": target.rows}',
               'per_class={"n": sql.SQL("count(*)")}', models),
        Mutant("k-sql-function", "sql/0001_k_anonymity.sql", "min_class_size >= k,",
               "min_class_size >= k - 1,", ("tests/test_check.py",)),
        Mutant("l-distinct", ld, 'failing=sql.SQL("d < {}")', 'failing=sql.SQL("d < {} - 1")',
               (*GATE, *models)),
        Mutant("l-entropy", ld, "sql.Literal(math.log(self.l) - TOLERANCE)",
               "sql.Literal(math.log(self.l) - 0.2)", (*GATE, *models)),
        Mutant("l-recursive", ld, "(WHERE pos >= {})", "(WHERE pos >= {} - 1)",
               (*GATE, *models)),
        Mutant("l-frequency", ld, "sql.Literal(1 / self.l + TOLERANCE)",
               "sql.Literal(1 / self.l + 0.1)", (*GATE, *models)),
        Mutant("t-threshold", tc, "sql.Literal(self.t + TOLERANCE)",
               "sql.Literal(self.t * 1.5 + TOLERANCE)", (*GATE, *models)),
        Mutant("t-equal-emd", tc, '"0.5 * (1 + sum(term))"', '"0.4 * (1 + sum(term))"', models),
        Mutant("t-ordered-divisor", tc, "sum(term)) / ({m} - 1) ELSE", "sum(term)) / ({m}) ELSE",
               models),
        Mutant("t-ordered-prefix-index", tc, "+ 2 * {gg}[e0 + 1]", "+ 2 * {gg}[e0]", models),
        Mutant("t-ordered-crossing", tc, "width_bucket(p1, {g})) AS e1",
               "width_bucket(p0, {g})) AS e1", models),
        Mutant("alpha-threshold", k, "alpha=sql.Literal(self.alpha + TOLERANCE)",
               "alpha=sql.Literal(self.alpha + 0.1)", (*GATE, *models)),
        Mutant("alpha-k", k, '"(n < {k} OR f > {alpha})"', '"(n < {k} - 1 OR f > {alpha})"',
               (*GATE, *models)),
        Mutant("alpha-value", k, "(WHERE s::text = {})", "(WHERE s::text <> {})",
               (*GATE, *models)),
        Mutant("p-threshold", k, '"(n < {k} OR d < {p})"', '"(n < {k} OR d < {p} - 1)"',
               (*GATE, *models)),
        Mutant("p-k", k, '"(n < {k} OR d < {p})"', '"(n < {k} - 1 OR d < {p})"',
               (*GATE, *models)),
        Mutant("theta-categories", th, '"(n < {k} OR good < {theta})"',
               '"(n < {k} OR good < {theta} - 1)"', theta),
        Mutant("theta-need", th, "FILTER (WHERE d >= need)", "FILTER (WHERE d >= need - 1)",
               theta),
        Mutant("theta-k", th, '"(n < {k} OR good < {theta})"', '"(n < {k} - 1 OR good < {theta})"',
               theta),
        Mutant("lca-any-level", lca, "HAVING count(DISTINCT m.label) = 1",
               "HAVING count(DISTINCT m.label) >= 1", ("tests/test_catalog.py",)),
        Mutant("lca-highest-level", lca, "    ORDER BY m.level\n",
               "    ORDER BY m.level DESC\n", ("tests/test_catalog.py",)),
        Mutant("lca-unknown-values", lca,
               "AND count(DISTINCT m.value) = (SELECT", "AND count(DISTINCT m.value) <= (SELECT",
               ("tests/test_catalog.py",)),
    ]  # fmt: skip


def guard_mutants() -> list[Mutant]:
    """The privacy gates over time and of kept columns, each weakened by one change: the
    intersection guard (its measure, plain and per bucket, the (θ,k) spread's categories and
    the refusal), the sealed policy's diff check, and the identifying-column gate."""
    comp, publish = "dbanon/setlogic/composition.py", "dbanon/lifecycle/publish.py"
    thetak, sealed = "dbanon/models/thetak.py", "dbanon/algorithms/sealed.py"
    ident = "dbanon/lifecycle/identifying.py"
    over_time = ("tests/test_composition.py", "tests/test_composition_resets.py")
    buckets = ("tests/test_cbg_intersection.py", "tests/test_composition_resets.py")
    spread = ("tests/test_thetak_guard.py",)
    diff = ("tests/test_diff_attack.py", "tests/test_sealed.py", "tests/test_composition.py")
    released = ("tests/test_identifying.py",)
    plain = " " * 22  # the plain measure's indent (the bucket form's is 11)
    refused = "found.rows_below_k or found.rows_below_l or found.rows_below_categories"
    return [
        Mutant("compose-k", comp, f"{plain}coalesce(sum(members) FILTER (WHERE plausible_rows "
               "< %(k)s), 0),\n", f"{plain}coalesce(sum(members) FILTER (WHERE plausible_rows "
               "< %(k)s - 1), 0),\n", over_time),
        Mutant("compose-l", comp, f"{plain}coalesce(sum(members) FILTER (WHERE plausible_values"
               " < %(l)s), 0)\n", f"{plain}coalesce(sum(members) FILTER (WHERE plausible_values"
               " < %(l)s - 1), 0)\n", over_time),
        Mutant("compose-rows-are-the-class", comp,
               "coalesce(m.plausible_rows, CASE WHEN p.old IS NULL THEN s.n END, 0)",
               "coalesce(s.n, 0)", over_time),
        Mutant("compose-buckets-k", comp, "\n           coalesce(sum(members) FILTER (WHERE "
               "plausible_rows < %(k)s), 0),\n", "\n           coalesce(sum(members) FILTER "
               "(WHERE plausible_rows < %(k)s - 1), 0),\n", buckets),
        Mutant("compose-buckets-l", comp, "\n           coalesce(sum(members) FILTER (WHERE "
               "plausible_values < %(l)s), 0)\n", "\n           coalesce(sum(members) FILTER "
               "(WHERE plausible_values < %(l)s - 1), 0)\n", buckets),
        Mutant("compose-refusal-skips-k", publish, refused,
               "found.rows_below_l or found.rows_below_categories", over_time),
        Mutant("compose-refusal-skips-l", publish, refused,
               "found.rows_below_k or found.rows_below_categories", over_time),
        Mutant("compose-values-needed-ignores-p", comp, 'for attr in ("l", "p"):',
               'for attr in ("l",):', over_time),
        Mutant("spread-refusal-skipped", publish, refused,
               "found.rows_below_k or found.rows_below_l", spread),
        Mutant("spread-category-need", comp, "count(*) FILTER (WHERE n >= need) AS cats",
               "count(*) FILTER (WHERE n >= need - 1) AS cats", spread),
        Mutant("spread-categories-least", comp, "FILTER (WHERE cats < %(least)s)",
               "FILTER (WHERE cats < %(least)s - 1)", spread),
        Mutant("spread-theta", thetak, "return Spread(self.theta, category, need,",
               "return Spread(self.theta - 1, category, need,", spread),
        Mutant("spread-need-one", thetak, "return Spread(self.theta, category, need,",
               "return Spread(self.theta, category, dict.fromkeys(need, 1),", spread),
        Mutant("sealed-group-lost-a-row-kept", sealed,
               "whole[: len(sizes)] = (counts[: len(sizes)] == sizes) & (sizes > 0)",
               "whole[: len(sizes)] = (counts[: len(sizes)] >= sizes - 1) & (sizes > 0)", diff),
        Mutant("sealed-diff-k", sealed, "return bool(counts.sum() >= k and",
               "return bool(counts.sum() >= k - 1 and", diff),
        Mutant("sealed-diff-l", sealed, "(counts > 0).sum() >= needed)",
               "(counts > 0).sum() >= needed - 1)", diff),
        Mutant("sealed-newcomers-unchecked", sealed,
               "(sum(sizes) == len(rows) or diff_safe(came, k, needed))", "True", diff),
        Mutant("sealed-leavers-unchecked", sealed,
               "return all(diff_safe(x, k, needed) for g, x in",
               "return all(diff_safe(x, 1, 1) for g, x in", diff),
        Mutant("sealed-fulldomain-ignores-l", "dbanon/methods/fulldomain_sealed.py",
               "r.k or 1, composition.values_needed(r.models),", "r.k or 1, 1,", diff),
        Mutant("sealed-fulldomain-unguarded", "dbanon/methods/fulldomain_sealed.py",
               "_shown(conn, r, hist), hist,\n            regroups=True,",
               "_shown(conn, r, hist), None,\n            regroups=True,", diff),
        Mutant("sealed-grouped-unguarded", "dbanon/methods/grouped.py",
               "                    _shown(conn, r, hist), hist, repair=repair,\n",
               "                    _shown(conn, r, hist), None, repair=repair,\n", diff),
        Mutant("identifying-together-threshold", ident,
               "        if share > limit:\n            named",
               "        if share > limit + 0.5:\n            named", released),
        Mutant("identifying-unique-inverted", ident, "FILTER (WHERE n = 1)",
               "FILTER (WHERE n > 1)", released),
        Mutant("identifying-share-not-settable", ident,
               "limit = float(r.spec.max_unique_share)", "limit = float(MAX_UNIQUE_SHARE)",
               released),
        Mutant("identifying-recheck-skipped", ident, "    if not r.keep:\n        return None",
               "    if True:\n        return None", released),
    ]  # fmt: skip


def located(path: str) -> str:
    """Where a file of the repository sits in the copy, as the package imports it."""
    top, _, rest = path.partition("/")
    return f"{PACKAGE_DIRS[top]}/{rest}" if top in PACKAGE_DIRS else path


def make_copy(scratch: Path) -> Path:
    tree = scratch / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(*IGNORED))
    for top, inside in PACKAGE_DIRS.items():
        shutil.copytree(tree / top, tree / inside)
    (scratch / "mutant_guard.py").write_text(GUARD)
    return tree


def run_tests(
    tree: Path, scratch: Path, tests: tuple[str, ...], keyword: str | None, timeout: int
) -> tuple[int, str]:
    """pytest in the copy, embedded server only, stopping at the first failure. Interrupted
    (a timeout, ^C), pytest gets SIGINT so that it stops its embedded server itself."""
    env = {k: v for k, v in os.environ.items() if k not in ("DBANON_DSN", "DBANON_HOME")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(tree), str(scratch)]),
        DBANON_MUTANT_TREE=str(tree),
        CI="true",
        PYTHONDONTWRITEBYTECODE="1",
    )
    selection = "not pg15" if keyword is None else f"not pg15 and ({keyword})"
    basetemp = scratch / "pytest"
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
           "-p", "mutant_guard", f"--basetemp={basetemp}", "-k", selection, *tests]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
        return proc.returncode, output.strip()
    except BaseException as e:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        if isinstance(e, subprocess.TimeoutExpired):
            return -1, f"timed out after {timeout} s"
        raise
    finally:
        stop_servers(basetemp)


def stop_servers(basetemp: Path) -> None:
    """Stop an embedded server a pytest run of ours left running (it was killed), by the pid
    in its data directory: SIGQUIT is PostgreSQL's immediate shutdown."""
    for pidfile in basetemp.glob("*/pgdata/postmaster.pid"):
        try:
            pid = int(pidfile.read_text().split("\n", 1)[0])
            os.kill(pid, signal.SIGQUIT)
        except (OSError, ValueError):
            pass


def last_lines(text: str, n: int = 15) -> str:
    return "\n".join(text.splitlines()[-n:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--only", help="comma-separated mutant names")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per pytest run")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)

    mutants = gate_mutants() + check_mutants() + guard_mutants()
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {m.name for m in mutants}
        if unknown:
            parser.error(f"unknown mutants: {', '.join(sorted(unknown))}")
        mutants = [m for m in mutants if m.name in wanted]
    if args.list:
        for m in mutants:
            print(f"{m.name}: {m.describe()}\n    runs {' '.join(m.tests)}")
        return 0

    def say(text: str) -> None:
        print(text, file=sys.stderr if args.json else sys.stdout, flush=True)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up on kill as on ^C
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="dbanon-mutants-"))
    results: dict[str, str] = {}
    try:
        tree = make_copy(scratch)
        everything = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
        code, output = run_tests(tree, scratch, everything, None, args.timeout)
        if code != 0:
            say(f"the unmutated copy fails its tests (exit {code}):\n{last_lines(output)}")
            return 2
        say(f"baseline: {len(everything)} test files pass in the copy")
        for m in mutants:
            target = tree / located(m.path)
            original = target.read_text(encoding="utf-8")
            found = original.count(m.old)
            if found != 1:
                raise SystemExit(f"mutant {m.name}: {m.old!r} occurs {found} times in {m.path}")
            target.write_text(original.replace(m.old, m.new), encoding="utf-8")
            try:
                t0 = time.monotonic()
                code, output = run_tests(tree, scratch, m.tests, m.keyword, args.timeout)
            finally:
                target.write_text(original, encoding="utf-8")
            verdict = {0: "survived", 1: "killed"}.get(code, "error")
            results[m.name] = verdict
            by = next(
                (x[len("FAILED ") :] for x in output.splitlines() if x.startswith("FAILED ")), ""
            )
            say(f"{m.name}: {verdict} ({time.monotonic() - t0:.0f} s){' by ' + by if by else ''}")
            if verdict == "error":
                say(last_lines(output))
    finally:
        if args.keep:
            say(f"scratch directory kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    survived = [n for n, v in results.items() if v == "survived"]
    errors = [n for n, v in results.items() if v == "error"]
    if args.json:
        print(json.dumps({"mutants": len(results), "survived": survived, "errors": errors,
                          "seconds": round(time.monotonic() - started)}))  # fmt: skip
    else:
        print(f"{len(results)} mutants, {len(survived)} survived"
              + (f": {', '.join(survived)}" if survived else "")
              + (f"; {len(errors)} could not be judged: {', '.join(errors)}" if errors else "")
              + f" ({time.monotonic() - started:.0f} s)")  # fmt: skip
    return 2 if errors else 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())

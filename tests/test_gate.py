"""The verification gate: a build that breaks any promised model is refused, for every method.

The tests are generated from the method registry (dbanon.methods.methods()): for every method
and every model kind it promises, a release is published (and checked by the independent
verifier, tests/verify.py), then the method's build is wrapped so that, after the real build,
it corrupts the built relation in a way that breaks exactly that model (every other promised
model still holds, by the verifier) — and publishing again must be refused naming that model,
with the previous release untouched. A method registered later gets these tests by registering
and adding its realistic parameters to CASES; a method without an entry fails a test here.

This is what proves that the gate checks every promise: verifying only the first promised model,
or a method whose `checks` leave a promised model out, lets a corrupted release through and
fails a test below.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
import verify
import verify_cbg
from helpers import cli, cli_json, make_table, snapshot
from psycopg import sql

from dbanon.core.spec import ReleaseSpec
from dbanon.lifecycle.declare import release_spec
from dbanon.lifecycle.resolve import resolve
from dbanon.methods import methods
from dbanon.methods.base import BuildContext, Built
from dbanon.models.specs import from_spec

DX = ["flu", "asthma", "diabetes", "cancer", "gout", "angina"]
QI = ["age", "region", "sex"]
ROWS = 120


@dataclass(frozen=True)
class Case:
    """How to publish with a method and where its promises are checked.

    `promises`: per model kind, the `publish` arguments of realistic releases that promise it
    (each variant is a test). The models are checked on the method's object number `obj`, over
    `qi` (None: the release's QIs) and the sensitive column, each row standing for `count` rows
    when set (an Anatomy ST table)."""

    promises: dict[str, list[tuple[str, ...]]]
    obj: int = 0
    qi: tuple[str, ...] | None = None
    count: str | None = None
    sensitive: str = "dx"  # the sensitive column when the method promises everything at once
    # Promises checked on another object than `obj`: kind -> (object number, its class columns).
    where: dict[str, tuple[int, tuple[str, ...]]] = field(default_factory=dict)
    # A release of two relations read together (a cross-bucket QIT + ST): its own independent
    # verifier (conn, published objects, promised models, sensitive, source rows) and its own
    # corruption (conn, built relations, sensitive, models, kind) -> (what, broken kinds).
    verify: Callable[..., None] | None = None
    corrupt: Callable[..., tuple[str, list[str]]] | None = None

    def at(self, kind: str) -> tuple[int, tuple[str, ...] | None]:
        """The object number and class columns where a promise of `kind` is checked."""
        return self.where.get(kind, (self.obj, self.qi))


THETA_K = ("--k", "4", "--theta", "2", "--sensitive", "severity", "--category-width", "3",
           "--seed", "3")  # fmt: skip
# What hamdist chooses on the ward at k=4 (one-hot features, by Hamming distance to dx).
HAMDIST_QI = ("sex=F", "sex=M", "region=N", "region=S", "region=W", "region=E")
CASES: dict[str, Case] = {
    "kmember": Case(
        {
            "k-anonymity": [
                ("--k", "4", "--seed", "3"),
                # partitioned: 120 rows in blocks of at most 30, and the leaf-count cost
                ("--k", "4", "--block-size", "30", "--cost", "ncp", "--seed", "3"),
            ],
            "p-k-anonymity": [("--k", "4", "--sensitive", "dx", "--p", "3", "--seed", "3")],
        }
    ),
    "mondrian": Case(
        {
            "k-anonymity": [("--k", "4")],
            "distinct-l-diversity": [("--k", "3", "--sensitive", "dx", "--l", "3")],
            "entropy-l-diversity": [
                ("--k", "3", "--sensitive", "dx", "--l", "2.5", "--l-kind", "entropy")
            ],
            "recursive-l-diversity": [
                ("--k", "3", "--sensitive", "dx", "--l", "2", "--l-kind", "recursive", "--c", "2")
            ],
            "frequency-l-diversity": [
                ("--k", "3", "--sensitive", "dx", "--l", "2", "--l-kind", "frequency")
            ],
        }
    ),
    "fulldomain": Case(
        {
            "k-anonymity": [("--k", "4")],
            "distinct-l-diversity": [("--k", "3", "--sensitive", "dx", "--l", "3")],
            "entropy-l-diversity": [
                ("--k", "3", "--sensitive", "dx", "--l", "3", "--l-kind", "entropy")
            ],
            "recursive-l-diversity": [
                ("--k", "3", "--sensitive", "dx", "--l", "2", "--l-kind", "recursive", "--c", "2")
            ],
            "t-closeness": [
                ("--k", "3", "--sensitive", "dx", "--t", "0.3"),  # equal ground (text)
                ("--k", "3", "--sensitive", "severity", "--t", "0.3"),  # ordered (numeric)
            ],
            "alpha-k-anonymity": [
                ("--k", "3", "--sensitive", "dx", "--alpha", "0.5"),
                ("--k", "3", "--sensitive", "dx", "--alpha", "0.3", "--alpha-value", "flu"),
            ],
            "p-k-anonymity": [("--k", "3", "--sensitive", "dx", "--p", "3")],
        }
    ),
    "anatomy": Case(
        {"frequency-l-diversity": [("--sensitive", "dx", "--l", "3", "--seed", "3")]},
        obj=1,
        qi=("group_id",),
        count="count",
    ),
    "thetak": Case(
        dict.fromkeys(("k-anonymity", "theta-k-anonymity"), [THETA_K]), sensitive="severity"
    ),
    # Projections: checked on the features they chose (a table, so the gate can corrupt it).
    "rfka": Case(
        {"k-anonymity": [("--k", "4", "--sensitive", "dx", "--as", "table", "--trees", "50",
                          "--seed", "3")]},
        qi=("region", "sex"),
    ),  # fmt: skip
    "hamdist": Case(
        {"k-anonymity": [("--k", "4", "--sensitive", "dx", "--as", "table")]},
        qi=HAMDIST_QI,
    ),
    "cbg": Case(
        {
            "k-anonymity": [("--k", "3", "--sensitive", "dx", "--l", "2")],
            "cross-bucket-l-diversity": [("--k", "2", "--sensitive", "dx", "--l", "3")],
        },
        verify=verify_cbg.verify_release,
        corrupt=verify_cbg.corrupt,
    ),
    # Local anatomy: l on each attribute's buckets (here dx, every value sensitive: NAME_dx_st);
    # LAG's k on NAME over its QIs.
    "localanatomy": Case(
        {"distinct-l-diversity": [("--sensitive", "dx", "--l", "3", "--seed", "3")]},
        obj=2,
        qi=("bucket_id",),
    ),
    "lag": Case(
        dict.fromkeys(
            ("k-anonymity", "distinct-l-diversity"),
            [("--k", "4", "--sensitive", "dx", "--l", "3", "--seed", "3")],
        ),
        where={"distinct-l-diversity": (2, ("bucket_id",))},
    ),
    # (ε,δ)-DP by sampling: k = 27 is the SDGS k for (0.5, 1e-3), so the promise and the
    # method's own check are one; it releases a sample, which its verifier allows.
    "safepub": Case(
        {"k-anonymity": [("--k", "27", "--epsilon", "0.5", "--delta", "1e-3", "--sensitive",
                          "dx", "--levels", "age=1,region=1,sex=1", "--seed", "3")]},
        verify=lambda conn, objects, promised, sensitive, source: verify_sample(
            conn, objects[0], promised, sensitive, source),
    ),  # fmt: skip
    # Methods that promise no class model: their own checks are gated below (OWN_CHECKS).
    "ina": Case({}),
    "noise": Case({}),
}
# Publish arguments of the methods that promise no class model (they perturb numeric columns).
OWN_CHECKS: dict[str, tuple[str, ...]] = {
    "ina": ("--sample", "40", "--seed", "3"),
    "noise": ("--size", "0.1", "--seed", "3"),
}


def gate_cases() -> list[Any]:
    """(method, kind, args) of every promise of every registered method; a promise without
    parameters in CASES is a case that fails, so that nobody forgets one."""
    out = []
    for name, method in methods().items():
        case = CASES.get(name)
        for kind in method.promises:
            variants = case.promises.get(kind) if case else None
            if not variants:
                out.append(pytest.param(name, kind, None, id=f"{name}-{kind}-MISSING"))
                continue
            for i, args in enumerate(variants):
                out.append(pytest.param(name, kind, args, id=f"{name}-{kind}-{i}"))
    return out


@pytest.fixture
def ward(conn: psycopg.Connection) -> list[tuple]:
    rng = random.Random(11)
    rows = [
        (i, rng.randint(20, 79), rng.choice("NSEW"), rng.choice("FM"), DX[i % 6],
         rng.randint(1, 9))
        for i in range(1, ROWS + 1)
    ]  # fmt: skip
    make_table(
        conn, "h", "ward",
        [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("sex", "text"),
         ("dx", "text"), ("severity", "int")],
        rows,
    )  # fmt: skip
    return rows


def publish_args(method: str, name: str, args: Sequence[str]) -> list[str]:
    return ["publish", name, "--source", "h.ward", "--key", "id", "--qi", ",".join(QI),
            "--algorithm", method, *args]  # fmt: skip


def sensitive_of(args: Sequence[str]) -> str | None:
    return args[list(args).index("--sensitive") + 1] if "--sensitive" in args else None


def verify_release(
    conn: psycopg.Connection, case: Case, out: dict, promised: list[dict], sensitive: str | None,
    source: list[tuple],
) -> None:  # fmt: skip
    """Every promised model on the published release, by the independent verifier; every
    source row released (sensitive values unchanged, as a multiset)."""
    if case.verify is not None:
        case.verify(conn, out["objects"], promised, sensitive, source)
        return
    for obj, qi in sorted({case.at(m["name"]) for m in promised}, key=repr):
        models = located(case, promised, obj, qi)
        sens = sensitive_at(models, sensitive)
        cls = verify.verify(conn, out["objects"][obj], list(qi or QI), models, sens, case.count)
        if sens is not None:
            column = ["id", "age", "region", "sex", "dx", "severity"].index(sens)
            assert cls.overall == Counter(r[column] for r in source)
        else:
            assert sum(cls.sizes) == len(source)


def verify_sample(
    conn: psycopg.Connection, table: str, promised: list[dict], sensitive: str | None,
    source: list[tuple],
) -> None:  # fmt: skip
    """A sampling release: every promised model by the verifier, and its sensitive values a
    non-empty sub-multiset of the source's."""
    cls = verify.verify(conn, table, QI, promised, sensitive)
    column = ["id", "age", "region", "sex", "dx", "severity"].index(sensitive or "dx")
    assert 0 < sum(cls.sizes) <= len(source)
    assert not cls.overall - Counter(r[column] for r in source)


def located(
    case: Case, models: list[dict[str, Any]], obj: int, qi: tuple[str, ...] | None
) -> list[dict[str, Any]]:
    """The promised models checked on object `obj` over `qi`."""
    return [m for m in models if case.at(m["name"]) == (obj, qi)]


def sensitive_at(models: list[dict[str, Any]], sensitive: str | None) -> str | None:
    """The sensitive column where only k-anonymity is checked is not read (LAG's NAME has
    none: every value of it is bucketised)."""
    return None if all(m["name"] == "k-anonymity" for m in models) else sensitive


# --- the corruption ----------------------------------------------------------------------------


def corrupt(
    conn: psycopg.Connection, relation: sql.Composable, qi: Sequence[str], sensitive: str | None,
    count: str | None, models: list[dict[str, Any]], target: str,
) -> tuple[str, list[str]]:  # fmt: skip
    """Change the built relation so that the model of kind `target` breaks, just, and every
    other promised model still holds, by the verifier: for k, rows of one class deleted down to
    k-1; else, in one class, the rarest sensitive value made another one, then the next rarest,
    until the model breaks (so at its boundary: l-1 distinct values, a share just above alpha,
    ...; a check off by a little lets it through). Where another promised model implies the
    goal ((theta,k) is k-anonymous too), breaking the goal alone is impossible: then it breaks
    with them. Returns what was done and the names (spec kinds) of the models it broke."""
    goal = next(m for m in models if m["name"] == target)
    others = [m for m in models if m is not goal]
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in qi)
    s = sql.Identifier(sensitive) if sensitive else sql.SQL("NULL")
    w = sql.Identifier(count) if count else sql.SQL("1")
    members: dict[tuple, list[tuple[str, Any, int]]] = {}
    for ctid, *key, value, weight in conn.execute(
        sql.SQL("SELECT ctid::text, {}, {}, {} FROM {}").format(cols, s, w, relation)
    ):
        members.setdefault(tuple(key), []).append((ctid, value, int(weight)))
    before = verify.fetch(conn, relation, qi, sensitive, count)
    assert verify.holds(before, goal), "the real build already breaks the model"

    for alone in (True, False):
        found = _corrupt(conn, relation, s, count, members, before, goal, others, alone)
        if found:
            return found
    raise AssertionError(f"no change of one class breaks {goal} among {models}")


def _corrupt(
    conn: psycopg.Connection, relation: sql.Composable, s: sql.Composable, count: str | None,
    members: dict[tuple, list[tuple[str, Any, int]]], before: verify.Classes,
    goal: dict[str, Any], others: list[dict[str, Any]], alone: bool,
) -> tuple[str, list[str]] | None:  # fmt: skip
    """The first change of one class (see corrupt) that breaks the goal, and `alone` no other
    model; None if there is none."""
    target = goal["name"]

    def breaks_the_goal(trial: verify.Classes) -> bool:
        return not verify.holds(trial, goal) and (
            not alone or all(verify.holds(trial, m) for m in others)
        )

    def broken(trial: verify.Classes) -> list[str]:
        return [m["name"] for m in [goal, *others] if not verify.holds(trial, m)]

    for key in sorted(members, key=lambda k_: (len(members[k_]), repr(k_))):
        rows = members[key]
        if target == "k-anonymity":
            assert count is None, "a weighted relation promising k: teach corrupt() to shrink it"
            kept = rows[: goal["k"] - 1]
            trial = before.replaced(key, Counter(v for _, v, _ in kept))
            if breaks_the_goal(trial):
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE ctid = ANY(%s::tid[])").format(relation),
                    [[c for c, _, _ in rows[len(kept) :]]],
                )
                return f"class {key} cut to {len(kept)} rows", broken(trial)
            continue
        weight = {c: n for c, _, n in rows}
        in_class = Counter({v: 0 for v in before.domain})
        for _, v, n in rows:
            in_class[v] += n
        for into in sorted(before.domain, key=lambda v: (-in_class[v], repr(v))):
            current = {c: v for c, v, _ in rows}
            while True:  # the class's rarest other value becomes `into`, one value at a time
                counts: Counter = Counter()
                for c, v in current.items():
                    counts[v] += weight[c]
                rest = [v for v in counts if v != into]
                if not rest:
                    break
                rarest = min(rest, key=lambda v: (counts[v], repr(v)))
                current = {c: into if v == rarest else v for c, v in current.items()}
                counts[into] += counts.pop(rarest)
                trial = before.replaced(key, counts)
                if breaks_the_goal(trial):
                    moved = [c for c, v, _ in rows if current[c] != v]
                    conn.execute(
                        sql.SQL("UPDATE {} SET {} = %s WHERE ctid = ANY(%s::tid[])").format(
                            relation, s
                        ),
                        [into, moved],
                    )
                    what = f"class {key}: {len(moved)} of its {len(rows)} rows made {into!r}"
                    return what, broken(trial)
    return None


# --- the tests ---------------------------------------------------------------------------------


def test_every_method_has_cases() -> None:
    """A registered method without realistic parameters for each promise gets no gate test."""
    for name, method in methods().items():
        assert name in CASES, f"add method {name!r} to CASES in {__file__}"
        missing = [k for k in method.promises if not CASES[name].promises.get(k)]
        assert not missing, f"CASES[{name!r}] lacks parameters for {missing}"
        if not method.promises:
            assert name in OWN_CHECKS, f"add method {name!r} to OWN_CHECKS in {__file__}"


@pytest.mark.parametrize("method", sorted(OWN_CHECKS))
def test_a_perturbed_build_that_leaks_is_refused(
    conn: psycopg.Connection, dsn: str, ward: list[tuple], monkeypatch: pytest.MonkeyPatch,
    method: str,
) -> None:  # fmt: skip
    """A method with checks of its own: a build that changes a column it must carry unchanged
    (here the sensitive one) is refused by those checks, and nothing else changes."""
    args = ["publish", "gate", "--source", "h.ward", "--key", "id", "--qi", "age,severity",
            "--algorithm", method, "--sensitive", "dx", *OWN_CHECKS[method]]  # fmt: skip
    code, out = cli_json(dsn, *args)
    assert code == 0, out
    assert conn.execute("SELECT count(*) FROM released.gate").fetchone()[0] == ROWS
    before = snapshot(conn)
    cls = type(methods()[method])
    real_build = cls.build

    def leaking_build(self: Any, conn_: psycopg.Connection, r: Any, ctx: BuildContext) -> Any:
        metrics = real_build(self, conn_, r, ctx)
        conn_.execute(
            psycopg.sql.SQL("UPDATE {} SET dx = 'leaked' WHERE dx = 'flu'").format(
                r.stored(ctx.built[0])
            )
        )
        return metrics

    monkeypatch.setattr(cls, "build", leaking_build)
    result = cli(dsn, *args, "--replace")
    assert result.exit_code == 2 and "failed its check of" in result.stderr, result.stderr
    after = snapshot(conn)
    runs = "dbanon.run"
    assert {k: v for k, v in after["relations"].items() if k != runs} == {
        k: v for k, v in before["relations"].items() if k != runs
    }


@pytest.mark.parametrize(("method", "kind", "args"), gate_cases())
def test_a_build_breaking_a_promise_is_refused(
    conn: psycopg.Connection, dsn: str, ward: list[tuple], monkeypatch: pytest.MonkeyPatch,
    method: str, kind: str, args: tuple[str, ...] | None,
) -> None:  # fmt: skip
    assert args is not None, f"add parameters for {method!r} promising {kind} to CASES"
    case = CASES[method]
    code, out = cli_json(dsn, *publish_args(method, "gate", args))
    assert code == 0, out
    promised = conn.execute(
        "SELECT spec->'models' FROM dbanon.release WHERE name = 'gate'"
    ).fetchone()[0]
    assert kind in [m["name"] for m in promised], (kind, promised)
    sensitive = sensitive_of(args)
    verify_release(conn, case, out, promised, sensitive, ward)
    before = snapshot(conn)

    cls = type(methods()[method])
    real_build = cls.build
    done: list[tuple[str, list[str]]] = []

    def corrupting_build(self: Any, conn_: psycopg.Connection, r: Any, ctx: BuildContext) -> Any:
        metrics = real_build(self, conn_, r, ctx)
        if case.corrupt is not None:
            rels = [r.stored(next(b for b in ctx.built if b.name == o)) for o in r.objects]
            done.append(case.corrupt(conn_, rels, sensitive, r.spec.models, kind))
            return metrics
        number, qi = case.at(kind)
        obj = r.objects[number]
        built = next(b for b in ctx.built if b.name == obj)
        models = located(case, r.spec.models, number, qi)
        done.append(
            corrupt(
                conn_,
                r.stored(built),
                list(qi or QI),
                sensitive_at(models, sensitive),
                case.count,
                models,
                kind,
            )
        )
        return metrics

    monkeypatch.setattr(cls, "build", corrupting_build)
    result = cli(dsn, *publish_args(method, "gate", args), "--replace")
    assert done, "the build was not called"
    what, broken = done[0]
    names = [from_spec(m).name for m in promised if m["name"] in broken]
    assert result.exit_code == 2, (what, result.stdout, result.stderr)
    assert any(f"failed its check of {n}" in result.stderr for n in names), (what, result.stderr)
    if broken != [kind]:  # the goal cannot break alone: a model that implies it broke too
        assert kind == "k-anonymity", broken
        assert all(b == kind or b.endswith("-k-anonymity") for b in broken), broken
    # Nothing changed but the run trail, which logs the refused run.
    after = snapshot(conn)
    runs = "dbanon.run"
    assert {k: v for k, v in after["relations"].items() if k != runs} == {
        k: v for k, v in before["relations"].items() if k != runs
    }
    assert {k: v for k, v in after.items() if k != "relations"} == {
        k: v for k, v in before.items() if k != "relations"
    }
    last = conn.execute("SELECT status, error FROM dbanon.run ORDER BY id DESC LIMIT 1").fetchone()
    assert last[0] == "failed" and "failed its check of" in last[1], last


# --- the checks a method names cover every promise ----------------------------------------------


def spec_models(method: str, args: Sequence[str]) -> list[dict[str, Any]]:
    """The models `publish --algorithm METHOD ARGS` promises, read from its flags as the CLI
    reads them."""
    flags = {"--k": ("k", int), "--l": ("l", float), "--l-kind": ("l_kind", str),
             "--c": ("c", float), "--t": ("t", float), "--t-ground": ("t_ground", str),
             "--alpha": ("alpha", float), "--alpha-value": ("alpha_value", str),
             "--p": ("p", int), "--theta": ("theta", int),
             "--category-width": ("category_width", float)}  # fmt: skip
    options: dict[str, Any] = {}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag in flags:
            key, kind = flags[flag]
            options[key] = kind(value)
    return release_spec("x", "s.t", "id", QI, method=method, **options).models


@pytest.mark.parametrize("method", sorted(n for n in CASES if CASES[n].promises))
def test_checks_name_every_promised_model(
    conn: psycopg.Connection, ward: list[tuple], method: str
) -> None:
    """With every model the method can promise promised at once, the checks it names (which the
    lifecycle runs) include each of them: a method cannot quietly leave a promise unchecked."""
    m = methods()[method]
    case = CASES[method]
    models: list[dict[str, Any]] = []
    for kind in m.promises:
        for args in case.promises[kind]:
            for model in spec_models(method, args):
                if model not in models:
                    models.append(model)
    kinds = {x["name"] for x in models}
    assert set(m.promises) <= kinds, (kinds, m.promises)
    spec = ReleaseSpec(
        name="all", source="h.ward", key="id", qi=QI, sensitive=[case.sensitive], method=method,
        models=models,
    )  # fmt: skip
    r = resolve(conn, spec)
    built = [Built(o, f"build_{i}") for i, o in enumerate(r.objects)]
    names = [c.name for c in m.checks(r, built)]
    for model in r.models:
        assert model.name in names, (model.name, names)
    assert len(r.models) == len(models) >= len(m.promises)


@pytest.mark.parametrize("method", sorted(OWN_CHECKS))
@pytest.mark.parametrize("pairing", ["swapped", "twice"])
def test_a_perturbed_build_that_mispairs_is_refused(
    conn: psycopg.Connection, dsn: str, ward: list[tuple], monkeypatch: pytest.MonkeyPatch,
    method: str, pairing: str,
) -> None:  # fmt: skip
    """The private map pairs released rows with source rows: a build whose map swaps two rows'
    keys (their other columns then differ from their source rows'), or names one key twice and
    another never (ids 1 and 7: the same dx, so no column differs row by row), is refused."""
    args = ["publish", "gate", "--source", "h.ward", "--key", "id", "--qi", "age,severity",
            "--algorithm", method, "--sensitive", "dx", *OWN_CHECKS[method]]  # fmt: skip
    cls = type(methods()[method])
    real_build = cls.build

    def mispairing_build(self: Any, conn_: psycopg.Connection, r: Any, ctx: BuildContext) -> Any:
        metrics = real_build(self, conn_, r, ctx)
        pairs = self._maps[r.spec.name]
        if pairing == "swapped":  # ids 1 and 2: different dx
            change = "key = CASE key WHEN '1' THEN '2' ELSE '1' END WHERE key IN ('1', '2')"
        else:
            change = "key = '7' WHERE key = '1'"
        conn_.execute(psycopg.sql.SQL("UPDATE {} SET " + change).format(pairs))
        return metrics

    monkeypatch.setattr(cls, "build", mispairing_build)
    result = cli(dsn, *args)
    assert result.exit_code == 2 and "failed its check of" in result.stderr, result.stderr
    assert "release rows" in result.stderr or "paired" in result.stderr, result.stderr
    assert conn.execute("SELECT to_regclass('released.gate')").fetchone()[0] is None

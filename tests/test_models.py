"""Privacy models: each SQL check against a pure-Python recomputation from the raw rows.

The reference here shares no code with dbanon.models: it groups the fetched rows itself and
computes the definitions literally, with exact fractions where the model does arithmetic, so a
wrong window, filter or formula in the SQL (or in the models' in-memory form) shows up.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import psycopg
import pytest
from helpers import cli_json, make_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from dbanon.errors import DbanonError
from dbanon.models import (
    AlphaKAnonymity,
    CheckResult,
    DistinctLDiversity,
    EntropyLDiversity,
    FrequencyLDiversity,
    KAnonymity,
    PKAnonymity,
    PrivacyModel,
    RecursiveCLDiversity,
    Target,
    TCloseness,
    from_options,
)
from dbanon.models.split import Split, ranges

# Real thresholds (entropy, frequency, EMD) are met within 1e-9, as the models document.
EPS = 1e-9
Key = tuple[Any, ...]


# --- the reference: definitions, literally ------------------------------------------------------


def group(rows: Sequence[Sequence[Any]], qi: Sequence[int], s: int | None) -> dict[Key, Counter]:
    """Equivalence classes of raw rows: QI values -> Counter of sensitive values (None = NULL)."""
    classes: dict[Key, Counter] = defaultdict(Counter)
    for r in rows:
        classes[tuple(r[i] for i in qi)][r[s] if s is not None else None] += 1
    return dict(classes)


def label(names: Sequence[str], key: Key) -> str:
    return ", ".join(f"{n}={'NULL' if v is None else v}" for n, v in zip(names, key, strict=True))


def ref_entropy(c: Counter) -> float:
    n = sum(c.values())
    return -sum(x / n * math.log(x / n) for x in c.values())


def ref_tail(c: Counter, l: int) -> int:  # noqa: E741
    """r_l + ... + r_m with r_i the i-th largest count."""
    return sum(sorted(c.values(), reverse=True)[l - 1 :])


def ref_emd(c: Counter, whole: Counter, ordered: bool) -> Fraction:
    n, total = sum(c.values()), sum(whole.values())
    order = sorted(whole, key=lambda v: (v is None, v if v is not None else 0))
    diffs = [Fraction(c[v], n) - Fraction(whole[v], total) for v in order]
    if not ordered:
        return sum(map(abs, diffs), Fraction(0)) / 2
    if len(order) == 1:
        return Fraction(0)
    run, acc = Fraction(0), Fraction(0)
    for d in diffs:
        run += d
        acc += abs(run)
    return acc / (len(order) - 1)


@dataclass
class Expected:
    holds: bool
    figures: dict[str, Any]
    worst: set[str]  # labels of every class the report may name as the worst


def extreme(classes: dict[Key, Counter], names: Sequence[str], key: Callable) -> set[str]:
    """Labels of the classes that come first by `key` (smaller = worse)."""
    best = min(key(c) for c in classes.values())
    return {label(names, k) for k, c in classes.items() if key(c) == best}


def expected(model: PrivacyModel, classes: dict[Key, Counter], names: Sequence[str]) -> Expected:
    """What the check of `model` must report, from the definition of the model."""
    size = {k: sum(c.values()) for k, c in classes.items()}
    m = model
    if isinstance(m, KAnonymity):
        small = [n for n in size.values() if n < m.k]
        return Expected(
            not small,
            {
                "classes": len(classes),
                "min_class_size": min(size.values()),
                "rows_in_small_classes": sum(small),
                "dm": sum(n * n for n in size.values()),  # discernibility (Bayardo & Agrawal)
            },
            extreme(classes, names, lambda c: sum(c.values())),
        )
    if isinstance(m, DistinctLDiversity):
        fails = sum(len(c) < m.l for c in classes.values())
        return Expected(
            fails == 0,
            {
                "min_distinct_sensitive": min(map(len, classes.values())),
                "classes_below_l": fails,
            },
            extreme(classes, names, len),
        )
    if isinstance(m, EntropyLDiversity):
        h = {k: ref_entropy(c) for k, c in classes.items()}
        fails = sum(x < math.log(m.l) - EPS for x in h.values())
        return Expected(
            fails == 0,
            {
                "min_entropy": min(h.values()),
                "min_entropy_l": math.exp(min(h.values())),
                "classes_below_entropy_l": fails,
            },
            extreme(classes, names, lambda c: round(ref_entropy(c), 9)),
        )
    if isinstance(m, RecursiveCLDiversity):
        c_ = Fraction(m.c)
        fails = sum(not max(c.values()) < c_ * ref_tail(c, m.l) for c in classes.values())
        tails = [ref_tail(c, m.l) for c in classes.values()]
        ratio = (
            None
            if 0 in tails
            else max(Fraction(max(c.values()), ref_tail(c, m.l)) for c in classes.values())
        )

        def badness(c: Counter) -> tuple:
            t = ref_tail(c, m.l)
            return (t != 0, 0 if t == 0 else -Fraction(max(c.values()), t))

        return Expected(
            fails == 0,
            {
                "max_r1_to_tail_ratio": ratio,
                "min_distinct_sensitive": min(map(len, classes.values())),
                "classes_failing_recursive": fails,
            },
            extreme(classes, names, badness),
        )
    if isinstance(m, FrequencyLDiversity):
        f = [Fraction(max(c.values()), sum(c.values())) for c in classes.values()]
        fails = sum(x > 1 / Fraction(m.l) + Fraction(EPS) for x in f)
        return Expected(
            fails == 0,
            {"max_frequency": max(f), "classes_above_1_over_l": fails},
            extreme(classes, names, lambda c: -Fraction(max(c.values()), sum(c.values()))),
        )
    if isinstance(m, AlphaKAnonymity):
        assert m.value is None

        def freq(c: Counter) -> Fraction:
            return Fraction(max(c.values()), sum(c.values()))

        def bad(c: Counter) -> bool:
            return sum(c.values()) < m.k or freq(c) > Fraction(m.alpha) + Fraction(EPS)

        fails = sum(map(bad, classes.values()))
        return Expected(
            fails == 0,
            {
                "min_class_size": min(size.values()),
                "max_frequency": max(map(freq, classes.values())),
                "classes_failing_alpha_k": fails,
            },
            extreme(classes, names, lambda c: (not bad(c), -freq(c), sum(c.values()))),
        )
    if isinstance(m, PKAnonymity):

        def bad_pk(c: Counter) -> bool:
            return sum(c.values()) < m.k or len(c) < m.p

        fails = sum(map(bad_pk, classes.values()))
        return Expected(
            fails == 0,
            {
                "min_class_size": min(size.values()),
                "min_distinct_sensitive": min(map(len, classes.values())),
                "classes_failing_p_k": fails,
            },
            extreme(classes, names, lambda c: (not bad_pk(c), len(c), sum(c.values()))),
        )
    raise AssertionError(m)


def expected_t(
    m: TCloseness, classes: dict[Key, Counter], names: Sequence[str], numeric: bool
) -> Expected:
    ordered = m.ground == "ordered" or (m.ground == "auto" and numeric)
    whole: Counter = Counter()
    for c in classes.values():
        whole.update(c)
    emd = {k: ref_emd(c, whole, ordered) for k, c in classes.items()}
    fails = sum(e > Fraction(m.t) + Fraction(EPS) for e in emd.values())
    return Expected(
        fails == 0,
        {
            "emd_ground": "ordered" if ordered else "equal",
            "max_emd": max(emd.values()),
            "classes_above_t": fails,
        },
        extreme(classes, names, lambda c: -ref_emd(c, whole, ordered)),
    )


def same(got: Any, want: Any) -> bool:
    if want is None or got is None or isinstance(want, str):
        return got == want
    return math.isclose(float(got), float(want), rel_tol=0, abs_tol=EPS)


def assert_agrees(
    result: CheckResult, want: Expected, context: Any = "", worst: str = "always"
) -> None:
    """`worst` is the target's: the worst class is named always, or only when the check fails
    (the default: counting is one pass, naming needs a second), or never."""
    assert result.holds is want.holds, (result, want, context)
    assert set(result.figures) == set(want.figures), (result, context)
    for name, value in want.figures.items():
        assert same(result.figures[name], value), (name, result, want, context)
    if worst == "always" or (worst == "failing" and not want.holds):
        assert result.worst_class in want.worst, (result, want.worst, context)
    else:
        assert result.worst_class is None, (result, context)


# --- property: SQL = definition = in-memory form, on random small tables ------------------------

QI_NAMES = ["a", "b"]


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[tuple], bool]:
    """Rows (a, b, s, w): two QIs with a NULL now and then, a sensitive value (int or text,
    NULL now and then) and a weight; and whether s is numeric."""
    numeric = draw(st.booleans())
    value = st.one_of(st.integers(0, 4), st.none()) if draw(st.booleans()) else st.integers(0, 4)
    row = st.tuples(
        st.integers(0, 2),
        st.sampled_from(["x", "y", None]) if draw(st.booleans()) else st.just("x"),
        value.map(lambda v: v if numeric or v is None else f"v{v}"),
        st.integers(1, 3),
    )
    return draw(st.lists(row, min_size=1, max_size=30)), numeric


def some_models(draw: st.DrawFn) -> list[PrivacyModel]:
    k = draw(st.integers(1, 5))
    return [
        KAnonymity(k),
        DistinctLDiversity(draw(st.integers(1, 4))),
        EntropyLDiversity(draw(st.sampled_from([1, 1.5, 2, 3, 4]))),
        RecursiveCLDiversity(draw(st.sampled_from([0.5, 1, 1.5, 2, 3])), draw(st.integers(1, 4))),
        FrequencyLDiversity(draw(st.sampled_from([1, 1.5, 2, 3, 4]))),
        AlphaKAnonymity(draw(st.sampled_from([0.25, 0.5, 2 / 3, 0.75, 1.0])), k),
        PKAnonymity(draw(st.integers(1, 4)), k),
    ]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=tables(), draw=st.data())
def test_every_model_agrees_with_its_definition(
    conn: psycopg.Connection,
    more_conns: list[psycopg.Connection],
    data: tuple[list[tuple], bool],
    draw: st.DataObject,
) -> None:
    """Each check, on a weighted table (a row stands for w rows; equal rows may repeat, so
    weights add up within a class and value) and on the same table with every row written out
    w times, reports what the definition computes from the written-out rows; the in-memory form
    gives the same verdict. So does the check of the written-out table counted in parts, on
    other backends (`dbanon.models.split`), the parts cut at drawn values of a drawn QI."""
    rows, numeric = data
    models = some_models(draw.draw)
    ts = [
        TCloseness(draw.draw(st.sampled_from([0.05, 0.1, 0.25, 0.5, 1.0])), g)
        for g in ("auto", "equal", "ordered")
    ]
    expanded = [r[:3] for r in rows for _ in range(r[3])]
    classes = group(expanded, [0, 1], 2)
    stype = "int" if numeric else "text"
    cols = [("a", "int"), ("b", "text"), ("s", stype)]
    conn.execute("DROP SCHEMA IF EXISTS h CASCADE")
    make_table(conn, "h", "plain", cols, expanded)
    make_table(conn, "h", "weighted", [*cols, ("w", "int")], rows)
    try:
        worst = draw.draw(st.sampled_from(["always", "failing", "never"]))
        targets = [
            Target(sql.Identifier("h", "plain"), QI_NAMES, "s", worst="always"),
            Target(sql.Identifier("h", "weighted"), QI_NAMES, "s", count="w", worst=worst),
        ]
        column = draw.draw(st.sampled_from([0, 1]))
        domain = [["0", "1", "2"], ["x", "y"]][column]
        bounds = sorted(draw.draw(st.sets(st.sampled_from(domain), min_size=1, max_size=3)))
        conds = ranges(sql.Identifier(f"q{column + 1}"), bounds)
        split = Split(list(zip(more_conns, conds, strict=False)))
        plain = sql.Identifier("h", "plain")
        targets.append(Target(plain, QI_NAMES, "s", worst=worst, split=split))
        for m in models:
            want = expected(m, classes, QI_NAMES)
            for target in targets:
                assert_agrees(m.check(conn, target), want, (m, target), target.worst)
            assert m.holds_in_memory(list(classes.values())) is want.holds, m
        for t in ts:
            want = expected_t(t, classes, QI_NAMES, numeric)
            for target in targets:
                assert_agrees(t.check(conn, target), want, (t, target), target.worst)
            assert t.holds_in_memory(list(classes.values())) is want.holds, t
    finally:
        conn.execute("DROP SCHEMA h CASCADE")


@settings(max_examples=300, deadline=None)
@given(
    classes=st.lists(
        st.dictionaries(st.sampled_from([None, 0, 1, 2, 3, 4, 5]), st.integers(1, 6), min_size=1),
        min_size=1,
        max_size=6,
    ),
    k=st.integers(1, 8),
    ell=st.integers(1, 5),
    c=st.sampled_from([0.5, 1, 1.5, 2, 3]),
    t=st.sampled_from([0.05, 0.1, 0.2, 0.35, 0.5, 1.0]),
)
def test_in_memory_forms_follow_the_definitions(
    classes: list[dict], k: int, ell: int, c: float, t: float
) -> None:
    """The algorithms' fast path, without a database, on many more partitions."""
    keyed = {(i,): Counter(cl) for i, cl in enumerate(classes)}
    for m in [
        KAnonymity(k),
        DistinctLDiversity(ell),
        EntropyLDiversity(ell),
        RecursiveCLDiversity(c, ell),
        FrequencyLDiversity(ell),
        AlphaKAnonymity(1 / ell, k),
        PKAnonymity(ell, k),
    ]:
        assert m.holds_in_memory(classes) is expected(m, keyed, ["i"]).holds, m
    for ground in ("auto", "equal", "ordered"):
        m = TCloseness(t, ground)
        # integer values (and NULL): "auto" means ordered
        assert m.holds_in_memory(classes) is expected_t(m, keyed, ["i"], True).holds, m


@pytest.fixture
def more_conns(dsn: str) -> Iterator[list[psycopg.Connection]]:
    """Four more backends, for checks counted in parts."""
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(4)]
    yield conns
    for c in conns:
        c.close()


# --- edge cases, with figures worked out by hand -------------------------------------------------


def check(conn: psycopg.Connection, model: PrivacyModel, rel: str = "t", **kw: Any) -> CheckResult:
    """The model's check of e.REL, naming its worst class whether or not it holds."""
    kw.setdefault("worst", "always")
    return model.check(conn, Target(sql.Identifier("e", rel), kw.pop("qi", ["g"]), **kw))


def test_one_class(conn: psycopg.Connection) -> None:
    """A single class is the whole relation: its distribution is the relation's (EMD 0)."""
    make_table(conn, "e", "t", [("g", "int"), ("s", "int")], [(1, 10), (1, 10), (1, 20)])
    assert check(conn, TCloseness(0.01), sensitive="s").figures["max_emd"] == 0
    assert check(conn, TCloseness(0.01, "equal"), sensitive="s").holds
    r = check(conn, KAnonymity(3))
    assert r.holds and r.figures == {
        "classes": 1, "min_class_size": 3, "rows_in_small_classes": 0, "dm": 9,
    }  # fmt: skip
    assert r.worst_class == "g=1"
    assert not check(conn, KAnonymity(4)).holds
    h = check(conn, EntropyLDiversity(1.9), sensitive="s").figures["min_entropy"]
    assert math.isclose(h, math.log(3) - 2 / 3 * math.log(2))  # -(2/3 ln 2/3 + 1/3 ln 1/3)


def test_recursive_diversity_with_tied_counts(conn: psycopg.Connection) -> None:
    """Ties among the r_i must not matter: class A = 3,3,3 and class B = 2,2,1,1."""
    rows = [("A", v) for v in "xxxyyyzzz"] + [("B", v) for v in "xxyyzw"]
    make_table(conn, "e", "t", [("g", "text"), ("s", "text")], rows)
    # l=2: A 3 < c*(3+3), B 2 < c*(2+1+1), both ratios 1/2
    # l=3: A 3 < c*3,       B 2 < c*(1+1),   both ratios 1; strict, so c = 1 fails both
    # l=4: A has no 4th value (empty tail, fails whatever c), B 2 < c*1
    cases = {
        (1.0, 2): (True, 0.5, 0),
        (0.5, 2): (False, 0.5, 2),
        (1.0, 3): (False, 1.0, 2),
        (1.01, 3): (True, 1.0, 0),
        (5.0, 4): (False, None, 1),
    }
    for (c, ell), (holds, ratio, failing) in cases.items():
        r = check(conn, RecursiveCLDiversity(c, ell), sensitive="s")
        assert r.holds is holds, (c, ell, r)
        assert r.figures["max_r1_to_tail_ratio"] == ratio, (c, ell, r)
        assert r.figures["classes_failing_recursive"] == failing, (c, ell, r)
        assert r.worst_class == "g=A"  # the empty tail, or a tie broken by the QI values
    # in memory, the same verdicts
    a, b = Counter("xxxyyyzzz"), Counter("xxyyzw")
    assert RecursiveCLDiversity(1.0, 2).holds_in_memory([a, b])
    assert not RecursiveCLDiversity(1.0, 3).class_holds(b)
    assert RecursiveCLDiversity(1.01, 3).holds_in_memory([a, b])


def test_t_closeness_numeric_is_ordered_categorical_is_not(conn: psycopg.Connection) -> None:
    """Values 1,2,3 equally frequent overall; class A = {1,1}, class B = {2,2,3,3}.
    Equal ground: A is 1/2 (|1-1/3| + 1/3 + 1/3) = 2/3 away. Ordered ground: A's cumulative
    differences are 2/3, 1/3, 0 over m-1 = 2, so 1/2; B's are -1/3, -1/6, 0, so 1/4."""
    rows = [("A", 1), ("A", 1), ("B", 2), ("B", 2), ("B", 3), ("B", 3)]
    make_table(conn, "e", "num", [("g", "text"), ("s", "int")], rows)
    make_table(conn, "e", "cat", [("g", "text"), ("s", "text")], [(g, str(v)) for g, v in rows])
    for rel, ground, emd in [
        ("num", "auto", 0.5),
        ("cat", "auto", 2 / 3),
        ("num", "equal", 2 / 3),
        ("cat", "ordered", 0.5),
    ]:
        r = check(conn, TCloseness(0.5, ground), rel, sensitive="s")
        assert math.isclose(r.figures["max_emd"], emd), (rel, ground, r)
        assert r.figures["emd_ground"] == ("ordered" if emd == 0.5 else "equal")
        assert r.holds is (emd <= 0.5) and r.worst_class == "g=A"
    # B (1/4 ordered, 1/3 equal) passes t = 0.3 only on the ordered ground; A fails both
    assert check(conn, TCloseness(0.3), "num", sensitive="s").figures["classes_above_t"] == 1
    assert check(conn, TCloseness(0.3), "cat", sensitive="s").figures["classes_above_t"] == 2
    num = [Counter({1: 2}), Counter({2: 2, 3: 2})]
    assert TCloseness(0.5).holds_in_memory(num)
    assert not TCloseness(0.5).holds_in_memory([Counter({"1": 2}), Counter({"2": 2, "3": 2})])


def test_weighted_rows_are_anatomys_sensitive_table(conn: psycopg.Connection) -> None:
    """An Anatomy ST (group_id, value, count) checks like the rows it stands for."""
    st_rows = [(1, "flu", 2), (1, "hiv", 1), (2, "flu", 1), (2, "cold", 1), (2, "hiv", 1)]
    make_table(conn, "e", "st", [("group_id", "int"), ("dx", "text"), ("count", "int")], st_rows)
    tgt = {"qi": ["group_id"], "sensitive": "dx", "count": "count"}
    k = check(conn, KAnonymity(3), "st", **tgt)
    assert k.holds and k.figures["min_class_size"] == 3 and k.figures["classes"] == 2
    f = check(conn, FrequencyLDiversity(2), "st", **tgt)  # group 1: flu 2/3 > 1/2
    assert not f.holds and math.isclose(f.figures["max_frequency"], 2 / 3)
    assert f.worst_class == "group_id=1"
    d = check(conn, DistinctLDiversity(2), "st", **tgt)
    assert d.holds and d.figures["min_distinct_sensitive"] == 2
    # without the weights each ST row would count once: group 1 would look like 2 rows
    assert check(conn, KAnonymity(3), "st", qi=["group_id"]).figures["min_class_size"] == 2


def test_bad_weights_are_named(conn: psycopg.Connection) -> None:
    make_table(
        conn,
        "e",
        "t",
        [("g", "int"), ("s", "text"), ("w", "numeric"), ("label", "text")],
        [(1, "a", 1, "x"), (1, "b", 2, "y")],
    )
    tgt = Target(sql.Identifier("e", "t"), ["g"], "s", count="label")
    with pytest.raises(DbanonError, match='count column label of e.t must be numeric'):
        KAnonymity(2).check(conn, tgt)
    for bad in ("0", "-1", "1.5", "NULL"):
        conn.execute(f"UPDATE e.t SET w = {bad} WHERE s = 'b'")  # constants, not user input
        tgt = Target(sql.Identifier("e", "t"), ["g"], "s", count="w")
        with pytest.raises(DbanonError, match="must hold positive whole numbers; 1 row") as e:
            DistinctLDiversity(2).check(conn, tgt)
        assert (bad if bad != "NULL" else "NULL") in str(e.value)
    conn.execute("UPDATE e.t SET w = 2.0 WHERE s = 'b'")  # a whole number stored as numeric
    assert KAnonymity(3).check(conn, tgt).holds


@pytest.mark.parametrize("kind", ["smallint", "int", "bigint", "numeric", "float8"])
def test_weights_sum_exactly_whatever_their_type(conn: psycopg.Connection, kind: str) -> None:
    """int2/int4 weights are summed as they are (into a bigint), others cast: each class's size
    is the exact sum either way, past int4's range too, and a bad weight is still named."""
    big = 30_000 if kind == "smallint" else 2_000_000_000
    rows = [(1, "a", big), (1, "b", big), (1, "c", 7), (2, "a", 3), (2, "b", 1)]
    make_table(conn, "e", "t", [("g", "int"), ("s", "text"), ("w", kind)], rows)
    tgt = Target(sql.Identifier("e", "t"), ["g"], "s", count="w")
    k = KAnonymity(4).check(conn, tgt)
    assert k.holds and k.figures["min_class_size"] == 4
    every = KAnonymity(2 * big + 8).check(conn, tgt)  # both classes small: every row summed
    assert not every.holds and every.figures["rows_in_small_classes"] == 2 * big + 11
    f = FrequencyLDiversity(2).check(conn, tgt)  # group 2: a in 3 of 4 rows
    assert not f.holds and math.isclose(f.figures["max_frequency"], 3 / 4)
    conn.execute("UPDATE e.t SET w = 0 WHERE s = 'c'")
    with pytest.raises(DbanonError, match="must hold positive whole numbers; 1 row"):
        KAnonymity(2).check(conn, tgt)


def test_null_is_a_sensitive_value(conn: psycopg.Connection) -> None:
    """A NULL sensitive value counts as a value: class 1 = {NULL, a}, class 2 = {NULL, NULL}."""
    rows = [(1, None), (1, "a"), (2, None), (2, None)]
    make_table(conn, "e", "t", [("g", "int"), ("s", "text")], rows)
    d = check(conn, DistinctLDiversity(2), sensitive="s")
    assert not d.holds and d.figures["min_distinct_sensitive"] == 1 and d.worst_class == "g=2"
    assert check(conn, DistinctLDiversity(2), sensitive="s", qi=["g", "s"]).worst_class in (
        "g=1, s=NULL",
        "g=1, s=a",
        "g=2, s=NULL",
    )
    a = check(conn, AlphaKAnonymity(0.5, 2), sensitive="s")
    assert not a.holds and a.figures["max_frequency"] == 1.0 and a.worst_class == "g=2"
    t = check(conn, TCloseness(0.5), sensitive="s")  # overall NULL 3/4, a 1/4
    assert math.isclose(t.figures["max_emd"], 0.25) and t.holds
    assert DistinctLDiversity(2).class_holds(Counter([None, "a"]))


def test_single_value_alpha_k(conn: psycopg.Connection) -> None:
    """(alpha,k) on one value: class 1 = hiv,flu,flu (hiv 1/3), class 2 = flu,flu,flu."""
    rows = [(1, "hiv"), (1, "flu"), (1, "flu"), (2, "flu"), (2, "flu"), (2, "flu")]
    make_table(conn, "e", "t", [("g", "int"), ("s", "text")], rows)
    r = check(conn, AlphaKAnonymity(0.5, 3, "hiv"), sensitive="s")
    assert r.holds and math.isclose(r.figures["max_value_frequency"], 1 / 3)
    assert r.worst_class == "g=1"
    general = check(conn, AlphaKAnonymity(0.5, 3), sensitive="s")
    assert not general.holds and general.figures["max_frequency"] == 1.0
    assert AlphaKAnonymity(0.5, 3, "hiv").holds_in_memory([Counter(["hiv", "flu", "flu"])])
    assert not AlphaKAnonymity(0.3, 3, "hiv").holds_in_memory([Counter(["hiv", "flu", "flu"])])


def test_column_names_cannot_clash_with_the_checks_own(conn: psycopg.Connection) -> None:
    """QIs named like the checks' aliases (q1, s, n, w, pos) and odd names give the same figures
    as plain names."""
    rows = [(i % 3, i % 2, f"v{i % 4}", 1 + i % 2) for i in range(24)]
    make_table(conn, "e", "plain", [("a", "int"), ("b", "int"), ("c", "text"), ("d", "int")], rows)
    odd = [("q2", "int"), ('N "x"', "int"), ("s", "text"), ("pos", "int")]
    make_table(conn, "e", "odd", odd, rows)
    for m in [KAnonymity(5), EntropyLDiversity(2), RecursiveCLDiversity(2, 2), TCloseness(0.2)]:
        plain = Target(sql.Identifier("e", "plain"), ["a", "b"], "c", "d", worst="always")
        a = m.check(conn, plain)
        b = m.check(
            conn, Target(sql.Identifier("e", "odd"), ["q2", 'N "x"'], "s", "pos", worst="always")
        )
        assert a.holds == b.holds and a.figures == b.figures, m
        assert a.worst_class == b.worst_class.replace("q2=", "a=").replace('N "x"=', "b=")


def test_empty_relation_and_missing_sensitive(conn: psycopg.Connection) -> None:
    make_table(conn, "e", "t", [("g", "int"), ("s", "int")], [])
    for m in [KAnonymity(2), DistinctLDiversity(2), TCloseness(0.1), PKAnonymity(2, 2)]:
        r = check(conn, m, sensitive="s")
        assert r.holds and r.worst_class is None, r
    with pytest.raises(DbanonError, match=r"entropy l-diversity \(l=2\) needs a sensitive"):
        check(conn, EntropyLDiversity(2))


# --- the CLI's factory ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"k": 0}, "--k must be at least 1, got 0"),
        ({"k": 2.5}, "--k must be a whole number, got 2.5"),
        ({"t": 2}, "--t must be in (0, 1], got 2"),
        ({"t": 0}, "--t must be in (0, 1], got 0"),
        ({"k": 2, "alpha": 1.5}, "--alpha must be in (0, 1], got 1.5"),
        ({"alpha": 0.5}, "--alpha needs --k"),
        ({"p": 2}, "--p needs --k"),
        ({"k": 2, "p": 0}, "--p must be at least 1, got 0"),
        ({"l": 0}, "--l must be at least 1, got 0"),
        ({"l": 2.5}, "--l must be a whole number, got 2.5"),
        ({"l": 0.5, "l_kind": "entropy"}, "--l must be at least 1, got 0.5"),
        ({"l": 2, "l_kind": "recursive"}, "--l-kind recursive needs --c"),
        ({"l": 2, "l_kind": "recursive", "c": 0}, "--c must be positive, got 0"),
        ({"l": 2, "c": 2}, "--c only applies to --l-kind recursive, not distinct"),
        ({"l_kind": "entropy"}, "--l-kind entropy needs --l"),
        ({"l": 2, "l_kind": "fuzzy"}, "--l-kind must be one of distinct, entropy, recursive"),
        ({"t": 0.2, "t_ground": "manhattan"}, "--t-ground must be one of auto, equal, ordered"),
        ({"k": "3"}, "--k must be a number, got '3'"),
        ({"t": float("nan")}, "--t must be a number, got nan"),
    ],
)
def test_from_options_rejects_bad_values(options: dict[str, Any], message: str) -> None:
    with pytest.raises(DbanonError) as e:
        from_options(**options)
    assert message in str(e.value)


def test_from_options_builds_what_the_options_name(conn: psycopg.Connection) -> None:
    """Built models judge a table as the named definitions do (not just the right classes)."""
    rows = [(i % 2, "xyz"[i % 3]) for i in range(12)]  # 2 classes of 6, 3 values twice each
    make_table(conn, "e", "t", [("g", "int"), ("s", "text")], rows)
    models = from_options(k=6, l=3, l_kind="entropy", t=0.01, alpha=1 / 3, p=3)
    results = [m.check(conn, Target(sql.Identifier("e", "t"), ["g"], "s")) for m in models]
    assert all(r.holds for r in results) and len(results) == 5
    assert not any(
        m.check(conn, Target(sql.Identifier("e", "t"), ["g"], "s")).holds
        for m in from_options(k=7, l=2, l_kind="recursive", c=0.5, alpha=0.3, p=4)
    )
    assert from_options() == []


def test_check_command_still_reports_k_and_l(dsn: str, conn: psycopg.Connection) -> None:
    """The CLI wiring that exists keeps working on top of the extended models."""
    rows = [(1, "a"), (1, None), (2, "b"), (2, "c")]  # class 1 is diverse only if NULL counts
    make_table(conn, "e", "t", [("g", "int"), ("s", "text")], rows)
    code, out = cli_json(
        dsn, "check", "e.t", "--qi", "g", "--k", "2", "--sensitive", "s", "--l", "2"
    )
    assert code == 0 and out["min_distinct_sensitive"] == 2 and out["min_class_size"] == 2
    code, out = cli_json(dsn, "check", "e.t", "--qi", "g", "--sensitive", "s", "--l", "3")
    assert code == 1 and out["classes_below_l"] == 2

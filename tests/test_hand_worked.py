"""(p,k), (alpha,k), (theta,k), frequency l-diversity and ordered-distance t-closeness on
tables small enough to work out by hand.

The random property test in test_models.py compares these checks with a reference on random
tables; a one-character bug in either SQL can still slip through a given run of it. The figures
here are computed by hand in the comments (exact fractions), so every run checks the same
numbers: the SQL checks, plain and weighted (each row standing for `w` rows, as an Anatomy ST
table), and the independent verifier (tests/verify.py), which must agree with the hand too.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction
from typing import Any

import psycopg
import pytest
import verify
from helpers import cli_json, make_table
from psycopg import sql

from dbanon.models import AlphaKAnonymity, FrequencyLDiversity, PKAnonymity, Target, TCloseness
from dbanon.models.thetak import ThetaKAnonymity


def tables(conn: psycopg.Connection, rows: list[tuple[str, Any]], stype: str) -> list[Target]:
    """The rows as e.t (g, s), and as e.w (g, s, w): equal rows collapsed into a weight."""
    make_table(conn, "e", "t", [("g", "text"), ("s", stype)], rows)
    weighted = [(g, s, n) for (g, s), n in sorted(Counter(rows).items(), key=repr)]
    make_table(conn, "e", "w", [("g", "text"), ("s", stype), ("w", "int")], weighted)
    return [
        Target(sql.Identifier("e", "t"), ["g"], "s", worst="always"),
        Target(sql.Identifier("e", "w"), ["g"], "s", count="w", worst="always"),
    ]


# --- (p,k)-anonymity ------------------------------------------------------------------------------

# A: flu flu hiv cold (4 rows, 3 values); B: flu flu flu (3 rows, 1 value); C: hiv cold (2, 2).
PK_ROWS = [("A", "flu"), ("A", "flu"), ("A", "hiv"), ("A", "cold"), ("B", "flu"), ("B", "flu"),
           ("B", "flu"), ("C", "hiv"), ("C", "cold")]  # fmt: skip
PK_CASES = [
    # (p, k): holds, classes failing, worst class (failing first, then fewest values, then rows)
    ((1, 2), True, 0, "g=B"),  # every class has >= 2 rows and >= 1 value; B has fewest values
    ((2, 2), False, 1, "g=B"),  # B: 1 value < 2
    ((1, 3), False, 1, "g=C"),  # C: 2 rows < 3
    ((3, 2), False, 2, "g=B"),  # B: 1 value, C: 2 values < 3; B has fewer
    ((2, 3), False, 2, "g=B"),  # B: 1 value < 2; C: 2 rows < 3; B has fewer values
    ((3, 4), False, 2, "g=B"),  # A: 4 rows, 3 values holds; B and C fail
    ((4, 1), False, 3, "g=B"),  # nobody has 4 values
]


@pytest.mark.parametrize(("pk", "holds", "failing", "worst"), PK_CASES)
def test_p_k_anonymity_by_hand(
    conn: psycopg.Connection, pk: tuple[int, int], holds: bool, failing: int, worst: str
) -> None:
    p, k = pk
    for target in tables(conn, PK_ROWS, "text"):
        r = PKAnonymity(p, k).check(conn, target)
        assert r.holds is holds, (pk, target.count, r)
        # smallest class: C (2 rows); fewest distinct values: B (1)
        assert r.figures == {
            "min_class_size": 2, "min_distinct_sensitive": 1, "classes_failing_p_k": failing,
        }, (pk, target.count, r)  # fmt: skip
        assert r.worst_class == worst, (pk, target.count, r)
        cls = verify.fetch(conn, target.relation, ["g"], "s", target.count)
        model = {"name": "p-k-anonymity", "p": p, "k": k}
        assert len(verify.failing(cls, model)) == failing
    classes = [
        Counter(["flu", "flu", "hiv", "cold"]),
        Counter(["flu"] * 3),
        Counter(["hiv", "cold"]),
    ]
    assert PKAnonymity(p, k).holds_in_memory(classes) is holds


def test_p_k_through_the_cli(conn: psycopg.Connection, dsn: str) -> None:
    """`dbanon check --k --p` reads the same two numbers, (p,k) after k."""
    make_table(conn, "e", "t", [("g", "text"), ("s", "text")], PK_ROWS)
    code, out = cli_json(dsn, "check", "e.t", "--qi", "g", "--sensitive", "s", "--k", "2",
                         "--p", "2")  # fmt: skip
    assert code == 1 and [m["holds"] for m in out["models"]] == [True, False]
    assert out["models"][1]["classes_failing_p_k"] == 1
    code, out = cli_json(dsn, "check", "e.t", "--qi", "g", "--sensitive", "s", "--k", "2",
                         "--p", "1")  # fmt: skip
    assert code == 0, out


# --- (alpha,k)-anonymity -------------------------------------------------------------------------

# A: flu flu hiv cold (4 rows; flu 2/4, hiv 1/4); B: flu flu flu hiv (4; flu 3/4, hiv 1/4);
# C: hiv cold (2; hiv 1/2, flu 0); D: hiv hiv cold (3; hiv 2/3, flu 0).
ALPHA_ROWS = [("A", "flu"), ("A", "flu"), ("A", "hiv"), ("A", "cold"), ("B", "flu"),
              ("B", "flu"), ("B", "flu"), ("B", "hiv"), ("C", "hiv"), ("C", "cold"),
              ("D", "hiv"), ("D", "hiv"), ("D", "cold")]  # fmt: skip
ALPHA_CASES = [
    # (alpha, k, value): holds, classes failing, largest share (of the value), worst class
    # (failing first, then the largest share, then the fewest rows)
    ((0.75, 2, None), True, 0, Fraction(3, 4), "g=B"),  # B's 3/4 is allowed (<=)
    ((0.7, 2, None), False, 1, Fraction(3, 4), "g=B"),  # B: 3/4 > 0.7
    ((0.75, 3, None), False, 1, Fraction(3, 4), "g=C"),  # C: 2 rows < 3
    ((0.5, 2, None), False, 2, Fraction(3, 4), "g=B"),  # B 3/4, D 2/3 > 1/2
    ((0.5, 2, "hiv"), False, 1, Fraction(2, 3), "g=D"),  # hiv: A 1/4, B 1/4, C 1/2, D 2/3
    ((2 / 3, 2, "hiv"), True, 0, Fraction(2, 3), "g=D"),  # D's 2/3 is allowed
    ((0.25, 2, "flu"), False, 2, Fraction(3, 4), "g=B"),  # flu: A 1/2, B 3/4, C 0, D 0
    ((0.75, 4, "flu"), False, 2, Fraction(3, 4), "g=C"),  # C (2 rows), D (3) < 4; flu 0 both
    ((1.0, 3, None), False, 1, Fraction(3, 4), "g=C"),  # shares never matter at alpha 1
]


@pytest.mark.parametrize(("model", "holds", "failing", "top", "worst"), ALPHA_CASES)
def test_alpha_k_anonymity_by_hand(
    conn: psycopg.Connection, model: tuple, holds: bool, failing: int, top: Fraction, worst: str
) -> None:
    alpha, k, value = model
    figure = "max_frequency" if value is None else "max_value_frequency"
    for target in tables(conn, ALPHA_ROWS, "text"):
        r = AlphaKAnonymity(alpha, k, value).check(conn, target)
        context = (model, target.count, r)
        assert r.holds is holds, context
        assert r.figures["min_class_size"] == 2 and r.figures["classes_failing_alpha_k"] == failing
        assert math.isclose(r.figures[figure], top), context
        assert r.worst_class == worst, context
        cls = verify.fetch(conn, target.relation, ["g"], "s", target.count)
        spec = {"name": "alpha-k-anonymity", "alpha": alpha, "k": k, "value": value}
        assert len(verify.failing(cls, spec)) == failing, context
    classes = [Counter(v for g_, v in ALPHA_ROWS if g_ == g) for g in "ABCD"]
    assert AlphaKAnonymity(alpha, k, value).holds_in_memory(classes) is holds


# --- frequency l-diversity ----------------------------------------------------------------------

# Shares just above 1/l: a threshold loosened by a tenth would pass every failing case below.
# A: flu flu hiv cold gout (5 rows; flu 2/5 = 0.4); B: flu hiv cold (3; each 1/3);
# C: hiv hiv hiv flu flu cold cold (7; hiv 3/7 = 0.4286).
FREQ_ROWS = [("A", "flu"), ("A", "flu"), ("A", "hiv"), ("A", "cold"), ("A", "gout"),
             ("B", "flu"), ("B", "hiv"), ("B", "cold"),
             ("C", "hiv"), ("C", "hiv"), ("C", "hiv"), ("C", "flu"), ("C", "flu"),
             ("C", "cold"), ("C", "cold")]  # fmt: skip
FREQ_CASES = [
    # l: classes failing (largest share above 1/l); the largest share is C's 3/7 in every case
    (3, 2),  # 1/3: A 2/5 and C 3/7 above; B's 1/3 is allowed (<=)
    (2.5, 1),  # 2/5: A's 2/5 is allowed; C 3/7 above by 1/35
    (2.4, 1),  # 5/12 = 0.4167: C 3/7 above by 1/84
    (7 / 3, 0),  # 3/7: C's 3/7 is allowed
    (2, 0),  # 1/2: all hold
]


@pytest.mark.parametrize(("ell", "failing"), FREQ_CASES)
def test_frequency_l_diversity_by_hand(conn: psycopg.Connection, ell: float, failing: int) -> None:
    for target in tables(conn, FREQ_ROWS, "text"):
        r = FrequencyLDiversity(ell).check(conn, target)
        context = (ell, target.count, r)
        assert r.holds is (failing == 0), context
        assert r.figures["classes_above_1_over_l"] == failing, context
        assert math.isclose(r.figures["max_frequency"], 3 / 7), context
        assert r.worst_class == "g=C", context  # the largest share, failing or not
        cls = verify.fetch(conn, target.relation, ["g"], "s", target.count)
        spec = {"name": "frequency-l-diversity", "l": ell}
        assert len(verify.failing(cls, spec)) == failing, context
    classes = [Counter(v for g_, v in FREQ_ROWS if g_ == g) for g in "ABC"]
    assert FrequencyLDiversity(ell).holds_in_memory(classes) is (failing == 0)


# --- (theta,k)-anonymity ------------------------------------------------------------------------

# Categories: intervals of width 10, so 1 2 | 11 12 | 21 are categories 0 | 1 | 2: 9 rows (1 x4,
# 2 x5), 5 rows (11 x3, 12 x2) and 2 rows (21 x2) of the 16.
# The paper's rule: need_c = min(floor(k/theta), V_c), V = 2, 2, 1.
# theta = 2, k = 4 or 5: need = 2, 2, 1. A: 1 2 11 12 (0 and 1 good); B: 1 2 21 (0 and 2
# good, 3 rows); C: 1 1 11 12 21 (1 and 2 good, 5 rows); D: 2 2 2 11 (none good). k = 4: B
# and D fail, D with no good category; k = 5: A (4 rows) too.
# The relaxed rule: need_c = max(1, min(floor(k/theta),
# floor(sum min(f_v, N_c) / N_c))), N = n // k, N_c = min(N, ceil(theta N r_c / n)).
# theta = 2, k = 4: N = 4; N_0 = 4, (4 + 4) // 4 = 2; N_1 = ceil(2.5) = 3, (3 + 2) // 3 = 1;
# N_2 = 1: need = 2, 1, 1. A: 1 2 11 12 (4 rows; 0 and 1 good: 2); B: 1 2 21 (3 rows; 0 and 2
# good, but 3 < k); C: 1 1 11 12 21 (5; 1 and 2 good); D: 2 2 2 11 (4; only 1 good).
# theta = 2, k = 5: N = 3; N_0 = 3, (3 + 3) // 3 = 2; N_1 = 2, (2 + 2) // 2 = 2; N_2 = 1:
# need = 2, 2, 1, so D has no good category.
THETA_ROWS = [("A", 1), ("A", 2), ("A", 11), ("A", 12), ("B", 1), ("B", 2), ("B", 21),
              ("C", 1), ("C", 1), ("C", 11), ("C", 12), ("C", 21),
              ("D", 2), ("D", 2), ("D", 2), ("D", 11)]  # fmt: skip
THETA_CASES = [
    # (theta, k), rule: classes failing, fewest good categories, worst class (failing first,
    # then fewest good categories, then fewest rows)
    ((2, 4), "relaxed", 2, 1, "g=D"),  # B (3 rows), D (one good category)
    ((2, 4), "paper", 2, 0, "g=D"),  # B (3 rows), D (no good category: 1 value of 0 and 1)
    ((2, 5), "relaxed", 3, 0, "g=D"),  # A, B, D; C (5 rows, 2 good) holds
    ((2, 5), "paper", 3, 0, "g=D"),
    # k = 3: floor(k/theta) = 1, need = min(1, V) = 1 by either rule, so a category is good
    # when present: A 2 (0, 1), B 2 (0, 2), C 3, D 2 (0, 1). theta = 2: all hold (the fewest
    # good categories, then the fewest rows: B). theta = 3: A, B and D fail, B first (3 rows).
    ((2, 3), "relaxed", 0, 2, "g=B"),
    ((2, 3), "paper", 0, 2, "g=B"),
    ((3, 3), "paper", 3, 2, "g=B"),
]


@pytest.mark.parametrize(("tk", "rule", "failing", "good", "worst"), THETA_CASES)
def test_theta_k_anonymity_by_hand(
    conn: psycopg.Connection, tk: tuple[int, int], rule: str, failing: int, good: int, worst: str
) -> None:
    theta, k = tk
    model = ThetaKAnonymity(theta, k, width=10, rule=rule)
    for target in tables(conn, THETA_ROWS, "int"):
        r = model.check(conn, target)
        context = (tk, target.count, r)
        assert r.holds is (failing == 0), context
        assert r.figures["min_class_size"] == 3, context
        assert r.figures["min_diverse_categories"] == good, context
        assert r.figures["classes_failing_theta_k"] == failing, context
        assert r.worst_class == worst, context
        cls = verify.fetch(conn, target.relation, ["g"], "s", target.count)
        spec = {"name": "theta-k-anonymity", "theta": theta, "k": k, "width": 10, "rule": rule}
        assert len(verify.failing(cls, spec)) == failing, context
    cells = [Counter((v // 10, v) for g_, v in THETA_ROWS if g_ == g) for g in "ABCD"]
    assert model.holds_in_memory(cells) is (failing == 0)
    assert sum(not model.class_holds(c, sum(cells, Counter())) for c in cells) == failing


# --- t-closeness, ordered ground distance --------------------------------------------------------

# Domain 1 < 2 < 3 < 4 (m = 4). A: 1 1 1 2; B: 3 3 4 4; C: 1 2 3 4 (12 rows).
# Overall counts 1:4 2:2 3:3 4:3, q = (4, 2, 3, 3)/12, cumulative G = (4, 6, 9, 12)/12.
# A: p = (9, 3, 0, 0)/12, F = (9, 12, 12, 12)/12, F - G = (5, 6, 3, 0)/12,
#    sum |F - G| = 14/12, EMD = 14/12 / (m - 1) = 7/18 (0.3889).
# B: p = (0, 0, 6, 6)/12, F = (0, 0, 6, 12)/12, F - G = (-4, -6, -3, 0)/12, EMD = 13/36 (0.3611).
# C: p = (3, 3, 3, 3)/12, F = (3, 6, 9, 12)/12, F - G = (-1, 0, 0, 0)/12, EMD = 1/36.
# Equal ground: A 1/2 (5 + 1 + 3 + 3)/12/2, B 1/2 (4 + 2 + 3 + 3)/12/2, C 1/12 (1 + 1)/12/2.
T_ROWS = [("A", 1), ("A", 1), ("A", 1), ("A", 2), ("B", 3), ("B", 3), ("B", 4), ("B", 4),
          ("C", 1), ("C", 2), ("C", 3), ("C", 4)]  # fmt: skip
T_EMD = {"ordered": {"A": Fraction(7, 18), "B": Fraction(13, 36), "C": Fraction(1, 36)},
         "equal": {"A": Fraction(1, 2), "B": Fraction(1, 2), "C": Fraction(1, 12)}}  # fmt: skip

# Domain 1..5 (m = 5) with gaps in the classes. X: 1 5; Y: 2 3 3 4; Z: 1 1 3 5 5 5 (12 rows).
# Overall 1:3 2:1 3:3 4:1 5:4, G = (3, 4, 7, 8, 12)/12.
# X: F = (6, 6, 6, 6, 12)/12, F - G = (3, 2, -1, -2, 0)/12, sum 8/12, EMD 8/12 / 4 = 1/6.
# Y: F = (0, 3, 9, 12, 12)/12, F - G = (-3, -1, 2, 4, 0)/12, sum 10/12, EMD 5/24 (0.2083).
# Z: F = (4, 4, 6, 6, 12)/12, F - G = (1, 0, -1, -2, 0)/12, sum 4/12, EMD 1/12.
# Equal ground, |p - q| in twelfths: X 3+1+3+1+2 = 10 -> 5/12; Y 3+2+3+2+4 = 14 -> 7/12;
# Z 1+1+1+1+2 = 6 -> 1/4.
GAP_ROWS = [("X", 1), ("X", 5), ("Y", 2), ("Y", 3), ("Y", 3), ("Y", 4), ("Z", 1), ("Z", 1),
            ("Z", 3), ("Z", 5), ("Z", 5), ("Z", 5)]  # fmt: skip
GAP_EMD = {"ordered": {"X": Fraction(1, 6), "Y": Fraction(5, 24), "Z": Fraction(1, 12)},
           "equal": {"X": Fraction(5, 12), "Y": Fraction(7, 12), "Z": Fraction(1, 4)}}  # fmt: skip


def expect(emd: dict[str, Fraction], t: float) -> tuple[bool, Fraction, int, str]:
    """holds, max EMD, classes above t, worst class (largest EMD, ties by the class name)."""
    above = sum(e > Fraction(t) for e in emd.values())
    worst = min(emd, key=lambda g: (-emd[g], g))
    return above == 0, max(emd.values()), above, f"g={worst}"


@pytest.mark.parametrize(
    ("rows", "emds", "t"),
    [(T_ROWS, T_EMD, t) for t in (0.39, 0.38, 0.36, 0.5, 0.45, 0.02)]
    + [(GAP_ROWS, GAP_EMD, t) for t in (0.21, 0.2, 0.1, 0.6, 0.5, 0.3)],
)
@pytest.mark.parametrize("stype", ["int", "text"])
def test_t_closeness_by_hand(
    conn: psycopg.Connection, rows: list[tuple], emds: dict, t: float, stype: str
) -> None:
    """Numbers (ground "auto" is ordered) and the same values as text, where "auto" is the
    equal ground and "ordered" must be asked for (one-digit text sorts as the numbers do)."""
    data = [(g, v if stype == "int" else str(v)) for g, v in rows]
    targets = tables(conn, data, stype)
    for ground in ("auto", "ordered", "equal"):
        used = "equal" if ground == "equal" or (ground == "auto" and stype == "text") else "ordered"
        holds, top, above, worst = expect(emds[used], t)
        for target in targets:
            r = TCloseness(t, ground).check(conn, target)
            context = (ground, stype, t, target.count, r)
            assert r.holds is holds, context
            assert r.figures["emd_ground"] == used, context
            assert math.isclose(r.figures["max_emd"], top, abs_tol=1e-9), context
            assert r.figures["classes_above_t"] == above, context
            assert r.worst_class == worst, context
            cls = verify.fetch(conn, target.relation, ["g"], "s", target.count)
            assert verify.max_emd(cls, used == "ordered") == top, context
        memory = [Counter(v for g_, v in data if g_ == g) for g in sorted(emds[used])]
        assert TCloseness(t, used).holds_in_memory(memory) is holds


def test_ordered_t_closeness_with_a_null_value(conn: psycopg.Connection) -> None:
    """NULL is a value of its own, last in the order. Domain 1 < 2 < NULL; A: 1 1, B: 2 NULL.
    q = (2, 1, 1)/4, G = (2, 3, 4)/4. A: F = (4, 4, 4)/4, F - G = (2, 1, 0)/4, EMD = 3/4 / 2 =
    3/8. B: F = (0, 2, 4)/4, F - G = (-2, -1, 0)/4, EMD 3/8."""
    rows = [("A", 1), ("A", 1), ("B", 2), ("B", None)]
    for target in tables(conn, rows, "int"):
        r = TCloseness(0.3, "ordered").check(conn, target)
        assert not r.holds and r.figures["classes_above_t"] == 2
        assert math.isclose(r.figures["max_emd"], 3 / 8)
        assert TCloseness(0.375).check(conn, target).holds

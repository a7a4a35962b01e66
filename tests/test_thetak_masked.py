"""The (θ,k) check over value bitmasks (dbanon.models.thetak.masked_test) against the cell form
it replaces where values are few: the same verdicts, figures and worst class on random tables,
under a hierarchy and under intervals, weighted and not, with values across several mask words,
values equal as numbers but not as text, and NULL QI values."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import psycopg
import pytest
from helpers import cli, make_table
from psycopg import sql

from dbanon.api import Database
from dbanon.models import thetak
from dbanon.models.base import Target
from dbanon.models.categories import Categories

QI = ["a", "b"]


def both(dsn: str, monkeypatch: pytest.MonkeyPatch, relation: str, **options: object) -> list:
    """The (θ,k) result of the masked test and of the cell form, in that order."""
    out = []
    for limit in (thetak.MAX_MASK_VALUES, 0):
        monkeypatch.setattr(thetak, "MAX_MASK_VALUES", limit)
        with Database(dsn) as db:
            *_, result = db.check(relation, QI, worst="always", **options)
        assert "(θ,k)" in result.model
        out.append(result)
    return out


def same(masked: object, cells: object) -> None:
    assert masked.holds is cells.holds  # type: ignore[attr-defined]
    assert masked.worst_class == cells.worst_class  # type: ignore[attr-defined]
    assert masked.figures.keys() == cells.figures.keys()  # type: ignore[attr-defined]
    for name, value in cells.figures.items():  # type: ignore[attr-defined]
        assert masked.figures[name] == pytest.approx(value, rel=1e-12), name  # type: ignore[attr-defined]


def test_masked_equals_cells_under_a_hierarchy(
    conn: psycopg.Connection, dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 150 values in 7 categories of uneven size: three 63-bit words, categories across words.
    values = [f"v{i:03d}" for i in range(150)]
    category = {v: f"c{min(i // 10, 6) if i < 60 else 6 - i % 3}" for i, v in enumerate(values)}
    path = tmp_path / "wide.csv"
    path.write_text("".join(f"{v};{c};*\n" for v, c in category.items()))
    assert cli(dsn, "hierarchy", "import", "wide", str(path)).exit_code == 0
    for trial in range(3):
        rng = random.Random(trial)
        pool = rng.sample(values, rng.randint(20, 150))
        rows = [(rng.choice([1, 2, 3, None]), rng.choice("xyz"), rng.choice(pool),
                 rng.randint(1, 4)) for _ in range(rng.randint(200, 600))]  # fmt: skip
        make_table(conn, "t", f"h{trial}",
                   [("a", "int"), ("b", "text"), ("s", "text"), ("w", "int")], rows)  # fmt: skip
        conn.commit()
        for (k, theta), rule, count in itertools.product(
            ((4, 2), (12, 3), (30, 5)), thetak.NEED_RULES, (None, "w")
        ):
            masked, cells = both(dsn, monkeypatch, f"t.h{trial}", sensitive="s", count=count,
                                 k=k, theta=theta, theta_rule=rule,
                                 sensitive_hierarchies={"s": "wide"})  # fmt: skip
            same(masked, cells)


def test_masked_equals_cells_under_intervals(
    conn: psycopg.Connection, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # numeric values: 2.50 and 2.5 are one value to the check (float8), two texts.
    rng = random.Random(5)
    pool = ["2.5", "2.50", "-0", "0", "7.25", "19.5", "33", "41.75", "58", "60.5", "99.125"]
    rows = [(rng.randint(1, 4), rng.choice("pq"), rng.choice(pool)) for _ in range(400)]
    make_table(conn, "t", "iv", [("a", "int"), ("b", "text"), ("s", "numeric")], rows)
    conn.commit()
    for (k, theta), rule in itertools.product(((4, 2), (9, 3)), thetak.NEED_RULES):
        masked, cells = both(dsn, monkeypatch, "t.iv", sensitive="s", k=k, theta=theta,
                             theta_rule=rule, category_width=20.0)  # fmt: skip
        same(masked, cells)


def test_masked_test_leaves_wide_domains_to_the_cell_form(
    conn: psycopg.Connection, dsn: str
) -> None:
    rows = [(i % 5, "x", float(i)) for i in range(thetak.MAX_MASK_VALUES + 1)]
    make_table(conn, "t", "many", [("a", "int"), ("b", "text"), ("s", "float8")], rows)
    conn.commit()
    model = thetak.ThetaKAnonymity(theta=2, k=4, width=10.0)
    target = Target(sql.Identifier("t", "many"), QI, "s")
    bound = Categories(width=10.0).bind(conn)
    assert thetak.masked_test(conn, model, bound, target) is None
    conn.execute("DELETE FROM t.many WHERE s >= 100")
    assert thetak.masked_test(conn, model, bound, target) is not None


@pytest.mark.parametrize("limit", [thetak.MAX_MASK_VALUES, 0])
def test_the_check_hands_its_class_sizes_to_the_publish(
    conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    """Inside a publish's `sizes.shared`, an unweighted (θ,k) check leaves the release's class
    sizes (its per-class n, masked or cell form) for the figures and risk, which then read no
    GROUP BY of their own: they must be the sizes a GROUP BY of the relation counts, NULL QI
    values a class of their own. A weighted check (n: the weights' sum) leaves none."""
    from dbanon.models import sizes

    monkeypatch.setattr(thetak, "MAX_MASK_VALUES", limit)
    rng = random.Random(limit)
    rows = [(rng.choice([1, 2, 3, None]), rng.choice(["x", "y", None]),
             rng.choice(["2.5", "7.25", "19.5", "33", "41.75", "58"]), rng.randint(1, 3))
            for _ in range(500)]  # fmt: skip
    make_table(conn, "t", "sz", [("a", "int"), ("b", "text"), ("s", "numeric"), ("w", "int")],
               rows)  # fmt: skip
    conn.commit()
    relation = sql.Identifier("t", "sz")
    fresh = sizes.histogram(conn, relation, QI)  # outside shared: counted by its GROUP BY
    assert sum(n * c for n, c in fresh.items()) == len(rows)
    model = thetak.ThetaKAnonymity(theta=2, k=3, width=20.0)
    for count, left in ((None, fresh), ("w", None)):
        with sizes.shared(conn):
            model.check(conn, Target(relation, QI, "s", count))
            memo = sizes._SHARED[id(conn)]
            assert memo.get((relation.as_string(conn), *QI, "")) == left

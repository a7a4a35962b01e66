"""`publish --algorithm kmember` end to end: the partitioned mode, the cost, both losses in the
run record, and refusals; released classes checked by the independent verifier."""

from __future__ import annotations

import random

import psycopg
import pytest
import verify
from helpers import cli, cli_json, make_table, snapshot

QI = "age,zip,sex"


@pytest.fixture
def people(conn: psycopg.Connection) -> int:
    rng = random.Random(4)
    rows = [
        (i, rng.randint(18, 90), str(13000 + rng.randint(0, 60)), rng.choice("FM"), "x")
        for i in range(600)
    ]
    make_table(
        conn, "clinic", "people",
        [("id", "int"), ("age", "int"), ("zip", "text"), ("sex", "text"), ("note", "text")],
        rows,
    )  # fmt: skip
    return len(rows)


def publish(dsn: str, name: str, *extra: str) -> tuple[int, dict]:
    return cli_json(
        dsn, "publish", name, "--source", "clinic.people", "--key", "id", "--qi", QI,
        "--k", "5", "--seed", "1", *extra,
    )  # fmt: skip


def test_partitioned_release_keeps_k_and_records_its_blocks(
    conn: psycopg.Connection, dsn: str, people: int
) -> None:
    code, out = publish(dsn, "blocks", "--block-size", "100", "--cost", "ncp")
    assert code == 0, out
    cls = verify.fetch(conn, ("released", "blocks"), QI.split(","))
    assert sum(cls.sizes) == people and min(cls.sizes) >= 5
    code, rep = cli_json(dsn, "report", "blocks")
    m = rep["method_metrics"]
    assert m["clustering"] == "partitioned" and m["block_size"] == 100 and m["blocks"] >= 6
    # Both losses under their own names, in [0, 1]. With flat hierarchies only, a group's
    # categorical value costs 1 by height (its LCA is the root) but only c / |A| for the set of
    # c values released by leaf count, so the leaf figure is the lower one.
    assert 0 < m["ncp_leaf"] < m["ncp_height"] < 1
    assert m["total_il_leaf"] == pytest.approx(m["ncp_leaf"] * people * 3)
    assert rep["gcp"] == pytest.approx(m["ncp_height"])
    # Small tables get the exact rule.
    code, out = publish(dsn, "exact")
    assert code == 0
    assert cli_json(dsn, "report", "exact")[1]["method_metrics"]["clustering"] == "exact"


def test_partitioned_pk_release_holds_p_values_per_class(
    conn: psycopg.Connection, dsn: str, people: int
) -> None:
    """(p,k) k-member in blocks: every released class has >= 5 rows and >= 3 distinct
    diagnoses, read back with plain SQL."""
    rng = random.Random(8)
    for i in range(people):
        dx = "flu" if rng.random() < 0.6 else rng.choice(["asthma", "gout", "angina", "ulcer"])
        conn.execute("UPDATE clinic.people SET note = %s WHERE id = %s", [dx, i])
    conn.commit()
    code, out = publish(dsn, "pk", "--block-size", "100", "--p", "3", "--sensitive", "note")
    assert code == 0, out
    worst = conn.execute(
        "SELECT min(n), min(d) FROM (SELECT count(*) AS n, count(DISTINCT note) AS d "
        "FROM released.pk GROUP BY age, zip, sex) c"
    ).fetchone()
    assert worst[0] >= 5 and worst[1] >= 3
    m = cli_json(dsn, "report", "pk")[1]["method_metrics"]
    assert m["clustering"] == "partitioned" and m["blocks"] >= 6


def test_contradicting_or_too_small_blocks_are_refused(
    conn: psycopg.Connection, dsn: str, people: int
) -> None:
    before = snapshot(conn)
    for extra, message in (
        (("--block-size", "100", "--exact"), "--block-size and --exact contradict"),
        (("--block-size", "9"), "--block-size must be at least 2k = 10"),
    ):
        result = cli(dsn, "publish", "bad", "--source", "clinic.people", "--key", "id",
                     "--qi", QI, "--k", "5", *extra)  # fmt: skip
        assert result.exit_code == 2, result.output
        assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert snapshot(conn) == before


def test_rows_put_in_order_in_place_and_back() -> None:
    """k-member clusters the rows in a secret order permuted in place (methods.kmember.
    in_order): inside, the arrays are what subset(qi, order) copies; after, and after an
    error inside, they are the caller's again, bit for bit."""
    import numpy as np

    from dbanon.algorithms.base import QIArrays
    from dbanon.algorithms.persist import subset
    from dbanon.core.hierarchy import Hierarchy
    from dbanon.methods.kmember import in_order

    rng = np.random.default_rng(3)
    n = 500
    flat = Hierarchy.flat("v", [f"v{i}" for i in range(7)])
    qi = QIArrays.build([rng.normal(size=n), rng.random(n)],
                        [(rng.integers(0, 7, n).astype(np.int32), flat)] * 2, n)  # fmt: skip
    num, cat = qi.num.copy(), qi.cat.copy()
    order = rng.permutation(n)
    with in_order(qi, order):
        want = subset(QIArrays(num, cat, qi.lca, qi.height, qi.hierarchies), order)
        assert np.array_equal(qi.num, want.num) and np.array_equal(qi.cat, want.cat)
    assert np.array_equal(qi.num, num) and np.array_equal(qi.cat, cat)
    with pytest.raises(ZeroDivisionError), in_order(qi, order):
        _ = 1 / 0
    assert np.array_equal(qi.num, num) and np.array_equal(qi.cat, cat)

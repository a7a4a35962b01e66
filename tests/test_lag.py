"""LAG (thesis ch. 5) end to end: the toy Table 5.2 (k=2, l=2) gives a release with the
properties of Table 5.4 under every variant, random tables with random flags pass the independent
checks (tests/verify_local.py), and bad input is refused in one line with nothing written."""

from __future__ import annotations

import random
from typing import Any

import psycopg
import pytest
import verify_local
from helpers import cli, cli_json, make_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_localanatomy import fresh_tables, refused_in_one_line

# Table 5.2: (id, age, gender, zip, disease); flags per column.
T52 = [
    (1001, 28, "Male", 21357, "Bronchitis"),
    (1002, 25, "Female", 21344, "Gastritis"),
    (1003, 16, "Male", 21352, "Dyspepsia"),
    (1004, 24, "Male", 21336, "Bronchitis"),
    (1005, 31, "Female", 21328, "Hepatitis"),
    (1006, 22, "Male", 21358, "Flu"),
    (1007, 29, "Female", 21340, "Pneumonia"),
    (1008, 34, "Male", 21328, "Bronchitis"),
]
T52_FLAGS = {"zip": {1001, 1002}, "age": {1004, 1005, 1007, 1008}, "gender": {1005, 1008}}
QI = ["age", "gender", "zip"]


def load_t52(conn: psycopg.Connection) -> list[dict[str, Any]]:
    make_table(
        conn, "toy", "t52",
        [("id", "int PRIMARY KEY"), ("age", "int"), ("gender", "text"), ("zip", "int"),
         ("disease", "text")],
        T52,
    )  # fmt: skip
    make_table(conn, "toy", "t52_flags", [("id", "int"), ("column_name", "text")],
               [(i, c) for c, ids in T52_FLAGS.items() for i in sorted(ids)])  # fmt: skip
    conn.commit()
    return [dict(zip(["id", *QI, "disease"], r, strict=True)) for r in T52]


def lag_args(name: str, *extra: str) -> list[str]:
    return ["publish", name, "--source", "toy.t52", "--key", "id", "--qi", ",".join(QI),
            "--sensitive", "disease", "--algorithm", "lag", "--flags", "toy.t52_flags",
            *extra]  # fmt: skip


@pytest.mark.parametrize("variant", ["partition", "ncp", "ncp-thesis"])
def test_table_5_2_gives_table_5_4(conn: psycopg.Connection, dsn: str, variant: str) -> None:
    """k=2, l=2: four groups, one per QI-partition subset ({age, gender} 1001/1002; all three
    1003/1006; {gender, zip} 1004/1007; {zip} 1005/1008), generalised as in Table 5.4; buckets
    as in Table 5.3; Mark (Male, zip 21336) matches exactly the two rows 1004 and 1007."""
    source = load_t52(conn)
    code, out = cli_json(dsn, *lag_args("t54", "--k", "2", "--l", "2", "--variant", variant,
                                        "--seed", "5"))  # fmt: skip
    assert code == 0, out
    flagged = {**T52_FLAGS, "disease": {r[0] for r in T52}}
    verify_local.verify_release(
        conn, "released", "t54", QI, dict.fromkeys([*T52_FLAGS, "disease"], ("l", 2)), source,
        flagged, k=2,
    )  # fmt: skip
    cols, main = verify_local.rows(conn, "released", "t54")
    assert cols == ["row_id", "group_id", *QI]
    groups = sorted({tuple(r[2:]) for r in main}, key=repr)
    assert groups == sorted(
        [("[25,28]", "*", None), ("[16,22]", "Male", "[21352,21358]"),
         (None, "*", "[21336,21340]"),
         (None, None, "21328")], key=repr,
    )  # fmt: skip
    assert sorted(
        sorted(c) for c in verify_local.buckets(conn, "released", "t54_zip_st", "zip").values()
    ) == [[21344, 21357]]
    ages = verify_local.buckets(conn, "released", "t54_age_st", "age")
    assert sorted(sum(c.values()) for c in ages.values()) == [2, 2]
    assert sorted(
        sorted(c) for c in verify_local.buckets(conn, "released", "t54_gender_st",
                                                "gender").values()
    ) == [["Female", "Male"]]  # fmt: skip
    dis = verify_local.buckets(conn, "released", "t54_disease_st", "disease")
    assert sorted(sum(c.values()) for c in dis.values()) == [2, 2, 2, 2]
    # Mark (Table 5.1): Male, zip 21336 -> the rows whose cells cover both: 1004 and 1007's.
    marks = [r for r in main if r[3] in ("*", "Male") and r[4] is not None
             and _covers(r[4], 21336)]  # fmt: skip
    assert len(marks) == 2 and marks[0][1] == marks[1][1]


def _covers(cell: str, value: int) -> bool:
    lo, _, hi = cell.strip("[]").partition(",")  # `[30,39]` or `30`
    return int(lo) <= value <= int(hi or lo)


@given(
    n=st.integers(20, 70), density=st.floats(0.05, 0.4), k=st.integers(2, 4),
    l_=st.integers(2, 3), variant=st.sampled_from(["partition", "ncp", "ncp-thesis"]),
    seed=st.integers(0, 10**6),
)  # fmt: skip
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
def test_random_tables_and_flags(
    dsn: str, n: int, density: float, k: int, l_: int, variant: str, seed: int
) -> None:
    """Random tables with random flags: every LAG release passes the independent checks
    (groups >= k within the QI-partition subsets, buckets l-diverse), or is refused in one line."""
    rng = random.Random(seed)
    rows = [(i, rng.randint(1, 30), rng.choice("abcd"), rng.randint(0, 9), f"v{rng.randint(0, 9)}")
            for i in range(1, n + 1)]  # fmt: skip
    flags = {c: {r[0] for r in rows if rng.random() < density} for c in ("a", "b")}
    with psycopg.connect(dsn) as conn:
        fresh_tables(conn, [("id", "int"), ("a", "int"), ("b", "text"), ("c", "int"),
                            ("s", "text")], rows, flags)  # fmt: skip
        result = cli(dsn, "publish", "r", "--source", "p.t", "--key", "id", "--qi",
                     "a,b,c", "--sensitive", "s", "--algorithm", "lag", "--k", str(k), "--l",
                     str(l_), "--flags", "p.f", "--variant", variant, "--seed",
                     str(seed))  # fmt: skip
        if result.exit_code == 2:
            assert "cannot publish" in result.stderr, result.stderr
            assert len(result.stderr.strip().splitlines()) == 1
            return
        assert result.exit_code == 0, result.stderr
        source = [dict(zip(["id", "a", "b", "c", "s"], r, strict=True)) for r in rows]
        released = {r[0] for r in conn.execute("SELECT row_id FROM released.r")}
        attrs = {c: ("l", l_) for c in ("a", "b") if flags[c]}
        assert len(released) <= n
        verify_local.verify_release(
            conn, "released", "r", ["a", "b", "c"], {**attrs, "s": ("l", l_)}, source,
            {**flags, "s": {r[0] for r in rows}}, k=k,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--k", "1", "--l", "2"), "k must be at least 2"),
        (("--l", "2"), "--algorithm lag needs --k"),
        (("--k", "2", "--l", "1"), "l must be above 1"),
        (("--k", "2", "--l", "3"), "attribute gender has 2 flagged values, fewer than l = 3"),
    ],
)
def test_bad_input_is_refused_in_one_line(
    conn: psycopg.Connection, dsn: str, extra: tuple[str, ...], message: str
) -> None:
    load_t52(conn)
    refused_in_one_line(conn, dsn, lag_args("bad", *extra), message)


def test_the_maps_fingerprints_are_made_as_the_rows_stream(
    conn: psycopg.Connection, dsn: str
) -> None:
    """LAG's map keeps each row's fingerprint as the extract streamed it (no join with the
    source): it is the one composition.fingerprint makes of the source row in SQL, which a
    refresh compares with; after an update, the refreshed map holds the changed row's new one."""
    from psycopg import sql

    from dbanon.db.catalog import Relation, columns
    from dbanon.setlogic.composition import fingerprint, fingerprint_kind, table

    load_t52(conn)
    source = Relation("toy", "t52")
    cols = columns(conn, source)
    released = [cols[c] for c in [*QI, "disease"]]
    kind = fingerprint_kind(conn, source, released)

    def compare() -> None:
        rid = conn.execute("SELECT id FROM dbanon.release WHERE name = 'fpm'").fetchone()[0]
        kept = dict(conn.execute(sql.SQL("SELECT key, fp FROM {}").format(table(rid))).fetchall())
        made = dict(conn.execute(sql.SQL("SELECT s.id::text, {} FROM toy.t52 s").format(
            fingerprint(released, "s", kind))).fetchall())  # fmt: skip
        assert kept and kept == {k: made[k] for k in kept}

    code, out = cli_json(dsn, *lag_args("fpm", "--k", "2", "--l", "2", "--seed", "5"))
    assert code == 0, out
    compare()
    conn.execute("UPDATE toy.t52 SET disease = 'Flu' WHERE id = 1001")
    conn.commit()
    code, out = cli_json(dsn, "refresh", "fpm")
    assert code == 0, out
    compare()


def _map_of(conn: psycopg.Connection, name: str) -> list[tuple[str, int, set | None, list]]:
    """The release's map as its tables hold it: (key, gid, plausible values, shown)."""
    from psycopg import sql

    from dbanon.setlogic.composition import table

    rid = conn.execute("SELECT id FROM dbanon.release WHERE name = %s", [name]).fetchone()[0]
    return [(k, g, None if v is None else set(v), sorted(s) if s is not None else None)
            for k, g, v, s in conn.execute(sql.SQL(
                "SELECT m.key, m.gid, v.vals, h.shown FROM {} m LEFT JOIN {} v USING (vid) "
                "LEFT JOIN {} h USING (sid)").format(table(rid), table(rid, "sets"),
                                                     table(rid, "shown")))]  # fmt: skip


def _released_classes(conn: psycopg.Connection, attrs: list[str]
                      ) -> tuple[dict[int, set[str]], dict[int, list[list[str]]]]:  # fmt: skip
    """Per group of released.r, read from the released tables alone: the values of the buckets
    its rows lie in (tagged as the map tags them), and each row's buckets."""
    values: dict[int, set[str]] = {}
    shown: dict[int, dict[int, list[str]]] = {}
    for g, rid in conn.execute("SELECT group_id, row_id FROM released.r"):
        values.setdefault(g, set())
        shown.setdefault(g, {})[rid] = []
    for a in attrs:
        for g, rid, b, v in conn.execute(
            f"SELECT r.group_id, r.row_id, i.bucket_id, s.{a}::text FROM released.r r "  # noqa: S608
            f"JOIN released.r_{a}_idt i USING (row_id) JOIN released.r_{a}_st s USING (bucket_id)"
        ):
            values[g].add(f"{a}\x1fv:{v}")
            if f"{a}\x1f{b}" not in shown[g][rid]:
                shown[g][rid].append(f"{a}\x1f{b}")
    return values, {g: sorted(sorted(s) for s in rows.values()) for g, rows in shown.items()}


def test_the_map_holds_what_the_release_shows(conn: psycopg.Connection, dsn: str) -> None:
    """LAG's map (written from the run's arrays) against the released tables: one row per
    released row; a new person's plausible values are exactly her group's buckets' values and
    what she was shown exactly her row's buckets. After a refresh, a person shown before keeps
    in each attribute she was seen to flag only values she had (the map only narrows), and
    every row released again is shown its own buckets."""
    rng = random.Random(11)
    rows = [(i, rng.randint(1, 30), rng.choice("abcd"), rng.randint(0, 9), f"v{rng.randint(0, 9)}")
            for i in range(1, 121)]  # fmt: skip
    flags = {c: {r[0] for r in rows if rng.random() < 0.3} for c in ("a", "b")}
    fresh_tables(conn, [("id", "int"), ("a", "int"), ("b", "text"), ("c", "int"),
                        ("s", "text")], rows, flags)  # fmt: skip
    args = ["publish", "r", "--source", "p.t", "--key", "id", "--qi", "a,b,c", "--sensitive",
            "s", "--algorithm", "lag", "--k", "3", "--l", "2", "--flags", "p.f", "--seed", "3"]
    assert cli(dsn, *args).exit_code == 0
    before = _map_of(conn, "r")
    values, shown = _released_classes(conn, ["a", "b", "s"])
    assert len(before) == conn.execute("SELECT count(*) FROM released.r").fetchone()[0]
    for _, g, vals, _ in before:
        assert vals == values[g]
    by_group: dict[int, list[list[str]]] = {}
    for _, g, _, s in before:
        by_group.setdefault(g, []).append(s)
    assert {g: sorted(s) for g, s in by_group.items()} == shown
    conn.execute("UPDATE p.t SET s = 'v0' WHERE id % 7 = 0")
    conn.commit()
    assert cli(dsn, "refresh", "r").exit_code == 0
    after = _map_of(conn, "r")
    was = {k: v for k, _, v, _ in before}
    values, shown = _released_classes(conn, ["a", "b", "s"])
    by_group = {}
    for key, g, vals, s in after:
        if g >= 0:
            by_group.setdefault(g, []).append(s)
        if was.get(key) is None or vals is None:
            continue
        for a in {t.split("\x1f")[0] for t in was[key]}:
            mine = {t for t in vals if t.startswith(a + "\x1f")}
            assert mine <= was[key], (key, a)
    assert {g: sorted(s) for g, s in by_group.items()} == shown


def test_labels_of_dates_numerics_and_floats(conn: psycopg.Connection, dsn: str) -> None:
    """Each group's labels (made in numpy from the streamed text) are what SQL makes of its
    rows (found through the private map): a date, numeric or float QI the text of its least
    and greatest values ([lo,hi], or the value), a text one the value its rows agree on or
    '*', and NULL where its rows flagged it."""
    from psycopg import sql

    from dbanon.setlogic.composition import table

    rng = random.Random(5)
    rows = [(i, f"2021-0{rng.randint(1, 9)}-{rng.randint(10, 28)}", rng.choice(
        ["1.50", "2.25", "10", "3.125", "-0.5", "1234567.000001"]), rng.choice(
        [0.1, 2.5, 1e-7, 3.0, 12345.678]), rng.choice("ab"), f"v{rng.randint(0, 5)}")
        for i in range(1, 161)]  # fmt: skip
    flags = {c: {r[0] for r in rows if rng.random() < 0.25} for c in ("d", "x")}
    fresh_tables(conn, [("id", "int"), ("d", "date"), ("x", "numeric"), ("y", "float8"),
                        ("b", "text"), ("s", "text")], rows, flags)  # fmt: skip
    assert cli(dsn, "publish", "r", "--source", "p.t", "--key", "id", "--qi", "d,x,y,b",
               "--sensitive", "s", "--algorithm", "lag", "--k", "3", "--l", "2", "--flags",
               "p.f", "--seed", "8").exit_code == 0  # fmt: skip
    rid = conn.execute("SELECT id FROM dbanon.release WHERE name = 'r'").fetchone()[0]
    shown = dict(conn.execute("SELECT DISTINCT group_id, ROW(d, x, y, b)::text FROM released.r"))
    assert len(shown) == conn.execute(
        "SELECT count(DISTINCT group_id) FROM released.r").fetchone()[0]  # one label a group
    def label(c: str, text: str = "({})::text") -> sql.Composable:
        """[lo,hi] or the value, each as `text` writes it."""
        lo, hi = text.format(f"min({c})"), text.format(f"max({c})")
        return sql.SQL(f"CASE WHEN min({c}) = max({c}) THEN {lo} ELSE '[' || {lo} || ',' || "
                       f"{hi} || ']' END")  # fmt: skip

    number = "trim_scale(({})::numeric)::text"  # numerics without trailing zeros: 2.50 -> 2.5
    expected = dict(conn.execute(sql.SQL(
        "SELECT m.gid, ROW(CASE WHEN bool_or(fd.id IS NULL) THEN {d} END, "
        "CASE WHEN bool_or(fx.id IS NULL) THEN {x} END, {y}, "
        "CASE WHEN min(t.b) = max(t.b) THEN min(t.b) ELSE '*' END)::text "
        "FROM {map} m JOIN p.t t ON t.id::text = m.key "
        "LEFT JOIN p.f fd ON fd.id = t.id AND fd.column_name = 'd' "
        "LEFT JOIN p.f fx ON fx.id = t.id AND fx.column_name = 'x' "
        "WHERE m.gid >= 0 GROUP BY m.gid"
    ).format(d=label("t.d"), x=label("t.x", number), y=label("t.y", number),
             map=table(rid))))
    assert shown == expected
    assert any(v.startswith("(,") for v in shown.values())  # some group shows d NULL


@pytest.mark.parametrize("seed", range(4))
def test_first_seen_numbers_values_as_the_rows_first_show_them(seed: int) -> None:
    """first_seen (a streamed column as the Coded that Coded.of would make of its decoded
    values: values in the order rows first show them, NULL among them) against that plain
    reading, on random columns with and without a NULL entry and entries no row uses."""
    import numpy as np

    from dbanon.db.stream import Values
    from dbanon.methods.lag import first_seen

    rng = np.random.default_rng(seed)
    for t in range(25):
        m, n = int(rng.integers(1, 30)), int(rng.integers(0, 400))
        words = [f"w{i}".encode() for i in range(m)]
        lens = np.array([-1 if t % 3 == 0 and i == 0 else len(w) for i, w in enumerate(words)],
                        dtype=np.int32)  # fmt: skip
        starts = np.zeros(m, np.int64)
        np.cumsum(np.maximum(lens[:-1], 0), out=starts[1:])
        data = np.frombuffer(b"".join(w for w, ln in zip(words, lens, strict=True) if ln >= 0),
                             dtype=np.uint8)  # fmt: skip
        codes = rng.integers(0, m, n).astype(np.int32)
        coded = first_seen(Values(codes, starts, lens, data))
        plain = [None if lens[e] < 0 else words[e].decode() for e in codes.tolist()]
        assert list(coded.values) == list(dict.fromkeys(plain))
        assert [coded.values[i] for i in np.asarray(coded.codes).tolist()] == plain

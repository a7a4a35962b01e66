"""Churn between refreshes, and an intersection attacker that reads only released relations.

Imports nothing from dbanon: the attacker is the consumer who kept every release. For a person
present in every release (key never deleted), whose current QIs it knows (it sees a QI update only
in the releases after it), its candidate rows in each release are those whose released QIs cover
the person's QIs at that time; its plausible values are the sensitive values every release's
candidates hold; its plausible rows are the newest release's candidates holding such a value.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import psycopg

DX = ["flu", "asthma", "diabetes", "cancer", "gout", "angina", "ulcer", "copd", "hiv", "lupus"]
REGIONS = ["north", "south", "east", "west", "centre", "isles"]
COLUMNS = [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("income", "int"),
           ("dx", "text")]  # fmt: skip


def person(rng: random.Random, i: int) -> tuple:
    return (i, rng.randint(18, 90), rng.choice(REGIONS), rng.randint(10, 200) * 500,
            rng.choice(DX))  # fmt: skip


def churn(
    conn: psycopg.Connection, rng: random.Random, table: str, next_id: int,
    inserts: float = 0.05, deletes: float = 0.03, updates: float = 0.02,
) -> int:  # fmt: skip
    """Delete, update the QIs of, and insert the given shares of the table's rows (as a
    fraction of its size before); returns the next free id."""
    ids = [r[0] for r in conn.execute(f"SELECT id FROM {table}").fetchall()]  # noqa: S608
    n = len(ids)
    gone = rng.sample(ids, round(n * deletes))
    conn.execute(f"DELETE FROM {table} WHERE id = ANY(%s)", [gone])  # noqa: S608
    left = sorted(set(ids) - set(gone))
    for i in rng.sample(left, round(n * updates)):
        _, age, region, income, _ = person(rng, i)
        conn.execute(
            f"UPDATE {table} SET age = %s, region = %s, income = %s WHERE id = %s",  # noqa: S608
            [age, region, income, i],
        )
    with conn.cursor() as cur, cur.copy(f"COPY {table} FROM STDIN") as copy:  # noqa: S608
        for _ in range(round(n * inserts)):
            copy.write_row(person(rng, next_id))
            next_id += 1
    return next_id


def _range(cell: Any) -> tuple[float, float]:
    """A released numeric cell ('36', '[36,40]', '36-40' of older releases, or '*') as
    (low, high)."""
    s = str(cell).strip("[]()")
    if s == "*":
        return -np.inf, np.inf
    parts = s.split(",", 1) if "," in s else s.split("-", 1)
    return float(parts[0]), float(parts[-1])


def _regions(cell: Any, regions: list[str]) -> int:
    """A released region cell (a value, '{a,b}' or '*') as a bit mask over `regions`."""
    s = str(cell)
    if s == "*":
        return (1 << len(regions)) - 1
    names = {p.strip().strip('"') for p in s.strip("{}").split(",")}
    return sum(1 << i for i, r in enumerate(regions) if r in names)


class Attacker:
    """The consumer who keeps every release of the churning table (age, region, income; dx)."""

    def __init__(self, dx: list[str] = DX, regions: list[str] = REGIONS) -> None:
        self.dx, self.regions = dx, regions
        self.values: dict[int, int] = {}  # person -> bit mask of plausible dx values so far
        self.alive: set[int] | None = None  # people present in every release so far

    def observe(
        self, people: list[tuple], released: list[tuple],
        buckets: dict[Any, set] | None = None,
    ) -> tuple[int, int, int]:  # fmt: skip
        """One more release: `people` are the source's rows (id, age, region, income, dx) at
        its time, `released` its rows (age, region, income, dx), or with `buckets` (cbg: the
        ST's values of each bucket) QIT rows (age, region, income, bucket). A person's
        candidate rows cover her QIs; her plausible values are those every release's
        candidates may hold; her plausible rows the newest candidates that may hold one.
        Returns (people present in every release, fewest plausible rows, fewest values)."""
        dxs, regions = self.dx, self.regions
        counts: dict[tuple, int] = {}
        for row in released:
            counts[tuple(row)] = counts.get(tuple(row), 0) + 1
        cells = list(counts)  # (QIs..., value or bucket): rows that may hold the same values
        age = np.array([_range(c[0]) for c in cells]).reshape(-1, 2)
        region = np.array([_regions(c[1], regions) for c in cells], dtype=np.int64)
        income = np.array([_range(c[2]) for c in cells]).reshape(-1, 2)
        size = np.array([counts[c] for c in cells], dtype=np.int64)
        may = np.zeros((len(cells), len(dxs)), dtype=np.int64)  # class -> values it may hold
        for i, c in enumerate(cells):
            for v in (buckets[c[3]] if buckets is not None else {c[3]}):
                may[i, dxs.index(v)] = 1
        now = {p[0]: p for p in people}
        alive = set(now) if self.alive is None else self.alive & set(now)
        ids = sorted(alive)
        fewest_rows = fewest_values = 10**9
        bits = 1 << np.arange(len(dxs), dtype=np.int64)
        for start in range(0, len(ids), 2000):
            chunk = [now[i] for i in ids[start : start + 2000]]
            a = np.array([p[1] for p in chunk], dtype=float)[:, None]
            g = np.array([1 << regions.index(p[2]) for p in chunk], dtype=np.int64)[:, None]
            m = np.array([p[3] for p in chunk], dtype=float)[:, None]
            cover = ((age[:, 0] <= a) & (a <= age[:, 1]) & ((region & g) != 0)
                     & (income[:, 0] <= m) & (m <= income[:, 1])).astype(np.int64)  # fmt: skip
            held = (cover @ may) > 0  # (people, values) their candidates may hold
            before = np.array([self.values.get(p[0], -1) for p in chunk], dtype=np.int64)
            plausible = held & ((before[:, None] & bits[None, :]) != 0)
            masks = (plausible * bits[None, :]).sum(axis=1)
            for p, mask in zip(chunk, masks.tolist(), strict=True):
                self.values[p[0]] = mask
            rows = (cover * ((plausible.astype(np.int64) @ may.T) > 0)) @ size
            fewest_rows = min(fewest_rows, int(rows.min(initial=10**9)))
            fewest_values = min(fewest_values, int(plausible.sum(axis=1).min(initial=10**9)))
        self.alive = alive
        self.values = {i: v for i, v in self.values.items() if i in alive}
        return len(alive), fewest_rows, fewest_values


class LagAttacker:
    """The consumer who keeps every LAG release of the churning table and knows each person's
    unflagged QIs (age, region, income) and which of her values she flagged.

    A release is NAME (age, region, income: generalised, NULL where flagged) and per flagged
    attribute its IDT (row id -> bucket) and ST (bucket -> values). A person's candidate rows
    show her flag pattern (NULL exactly where she flagged) and cover her unflagged values; per
    flagged attribute her plausible values are those every release's candidates' buckets held;
    her plausible rows are the newest candidates whose bucket holds a plausible value in every
    attribute she flagged."""

    QI = ("age", "region", "income")

    def __init__(self, vocab: dict[str, list]) -> None:
        self.vocab = vocab  # per bucketised attribute: every value it can take
        self.index = {a: {v: i for i, v in enumerate(vs)} for a, vs in vocab.items()}
        self.values: dict[tuple[int, str], np.ndarray] = {}  # (person, attr) -> plausible
        self.alive: set[int] | None = None

    def observe(
        self, people: list[tuple], flags: dict[str, set[int]], main: list[tuple],
        buckets: dict[str, dict[int, int]], st: dict[str, dict[int, set]],
        regions: list[str] = REGIONS,
    ) -> tuple[int, int, int]:  # fmt: skip
        """One more release: `people` (id, age, region, income, ...) at its time, `flags`
        attr -> ids that flag it (the bucketised attributes not among the QIs: everyone),
        `main` NAME's rows (row_id, age, region, income), `buckets` attr -> row id -> bucket,
        `st` attr -> bucket -> values. Returns (people present in every release, fewest
        plausible rows, fewest plausible values of an attribute)."""
        attrs = list(self.vocab)
        types: dict[tuple, int] = {}  # (cells..., bucket per attr) -> rows
        for row in main:
            key = (*row[1:], *(buckets.get(a, {}).get(row[0], -1) for a in attrs))
            types[key] = types.get(key, 0) + 1
        keys = list(types)
        count = np.array([types[t] for t in keys], dtype=np.int64)
        nulls = np.array([[c is None for c in t[:3]] for t in keys], dtype=bool).reshape(-1, 3)
        age = np.array([_range(t[0]) if t[0] is not None else (0, -1) for t in keys]).reshape(-1, 2)
        region = np.array([_regions(t[1], regions) if t[1] is not None else 0 for t in keys],
                          dtype=np.int64)  # fmt: skip
        income = np.array([_range(t[2]) for t in keys]).reshape(-1, 2)
        holds = {}  # attr -> (types, values) the type's bucket holds
        for j, a in enumerate(attrs):
            m = np.zeros((len(keys), len(self.vocab[a])), dtype=np.float32)
            for i, t in enumerate(keys):
                for v in st[a].get(t[3 + j], ()):
                    m[i, self.index[a][v]] = 1
            holds[a] = m
        now = {p[0]: p for p in people}
        alive = set(now) if self.alive is None else self.alive & set(now)
        ids = sorted(alive)
        fewest_rows = fewest_values = 10**9
        for start in range(0, len(ids), 500):
            chunk = [now[i] for i in ids[start : start + 500]]
            flagged = np.array([[p[0] in flags.get(q, ()) for q in self.QI] for p in chunk],
                               dtype=bool).reshape(-1, 3)  # fmt: skip
            a_ = np.array([p[1] for p in chunk], dtype=float)[:, None]
            g = np.array([1 << regions.index(p[2]) for p in chunk], dtype=np.int64)[:, None]
            m_ = np.array([p[3] for p in chunk], dtype=float)[:, None]
            cover = (nulls[None, :, :] == flagged[:, None, :]).all(axis=2)
            cover &= flagged[:, 0:1] | ((age[:, 0] <= a_) & (a_ <= age[:, 1]))
            cover &= flagged[:, 1:2] | ((region & g) != 0)
            cover &= flagged[:, 2:3] | ((income[:, 0] <= m_) & (m_ <= income[:, 1]))
            ok = cover.copy()
            seen = cover.any(axis=1)  # a person in a suppressed subset is not released
            for a in attrs:
                mine = np.array([p[0] in flags[a] for p in chunk], dtype=bool)
                held = (cover.astype(np.float32) @ holds[a]) > 0  # values her candidates hold
                before = np.array([self.values.get((p[0], a), np.ones(len(self.vocab[a]), bool))
                                   for p in chunk])  # fmt: skip
                plausible = held & before
                for p, v, f in zip(chunk, plausible, mine.tolist(), strict=True):
                    if f:
                        self.values[(p[0], a)] = v
                if (mine & seen).any():
                    fewest_values = min(fewest_values,
                                        int(plausible[mine & seen].sum(axis=1).min()))  # fmt: skip
                hit = (plausible.astype(np.float32) @ holds[a].T) > 0
                ok &= hit | ~mine[:, None]
            fewest_rows = min(fewest_rows, int((ok @ count)[seen].min(initial=10**9)))
        self.alive = alive
        self.values = {k: v for k, v in self.values.items() if k[0] in alive}
        return len(alive), fewest_rows, fewest_values


def theta_k_needs(
    values: list[Any], category: dict[Any, Any], k: int, theta: int, rule: str = "paper"
) -> dict:
    """need_c of (θ,k)-anonymity from a release's sensitive values (one per row), written
    out again from its definition: the paper's min(k // θ, V_c), V_c the category's distinct
    values; relaxed: N = max(1, n // k) classes, N_c = min(N, ⌈θ N r_c / n⌉) the category's
    share, need_c = max(1, min(k // θ, Σ_v min(f_v, N_c) // N_c))."""
    f: dict[Any, int] = {}
    for v in values:
        f[v] = f.get(v, 0) + 1
    if rule == "paper":
        distinct: dict[Any, int] = {}
        for v in f:
            distinct[category[v]] = distinct.get(category[v], 0) + 1
        return {c: min(k // theta, x) for c, x in distinct.items()}
    n = len(values)
    big = max(1, n // k)
    rows: dict[Any, int] = {}
    for v, x in f.items():
        rows[category[v]] = rows.get(category[v], 0) + x
    share = {c: min(big, -(-theta * big * x // n)) for c, x in rows.items()}
    supply: dict[Any, int] = {}
    for v, x in f.items():
        supply[category[v]] = supply.get(category[v], 0) + min(x, share[category[v]])
    return {c: max(1, min(k // theta, x // share[c])) for c, x in supply.items()}


def fewest_categories(attacker: Attacker, category: dict[Any, Any], need: dict) -> int:
    """Of the people the attacker has seen in every release, the fewest categories their
    plausible values fill to need_c (a category's values: those the attacker still finds
    plausible for her)."""
    fewest = 10**9
    for mask in attacker.values.values():
        per: dict[Any, int] = {}
        for i, v in enumerate(attacker.dx):
            if mask >> i & 1:
                per[category[v]] = per.get(category[v], 0) + 1
        fewest = min(fewest, sum(n >= need.get(c, 1) for c, n in per.items()))
    return fewest

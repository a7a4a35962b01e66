"""The local anatomy chapter's experiments (thesis ch. 4.4-4.5, Figs 4.3-4.8 and 4.10).

Why one module of about 650 lines: one chapter's experiment, whose data set, workload, the
releases it compares (published through the lifecycle, or the in-memory baselines) and the
series they feed share one setting (Table 4.5); split, every part would import the others'
setting. What is not particular to the chapter lives in dbanon.metrics and dbanon.algorithms.

Setting (Table 4.5, with the cross-bucket issue's salary stand-in on Adult, dbanon.data.salary,
for the thesis's IPUMS extract): 17,629 rows; QI sex, relationship, marital status, race,
education, hours per week; semi-sensitive age and occupation, a share `density` of each flagged
by the seeded generator (dbanon.core.flags.draw) and kept as a flags relation; salary sensitive
(every value). Every local-anatomy release is published through dbanon's lifecycle (`publish
--method localanatomy`: validation, the method, the independent gate) from a table of the
sample, and its released relations are read back (dbanon.metrics: boxes and buckets for the
shared query workload, 1,000 queries; the personalised attacker for exposure, matching the
source's people to the released rows as dbanon.metrics.personal defines it). l is never capped:
an attribute whose flagged values are not l-eligible is infeasible at that l, left out of the
release, and reported as such (`feasible_<column>` false, no exposure: a gap in the plots).
The baselines (Anatomy, Mondrian) are computed in memory on the pure algorithms. Categorical
QIs generalise flat (a value, or '*' once a group mixes values): the thesis gives no
hierarchies (§6.2 item 17).

Series:
- exposure vs l (Figs 4.3/4.4), density 20 %: Anatomy with the semi-sensitive attributes as QI
  (its QIT shows them), heuristic LA under attacker (a) (LocalAnatomy_1) and (b)
  (LocalAnatomy_2); semi-sensitive attributes and salary separately;
- query error vs l (Figs 4.5/4.6), density 20 %: Mondrian (l-diverse on salary, k = l,
  semi-sensitive as QI), Anatomy, LA, heuristic LA;
- density 10-40 % (Figs 4.7/4.8): heuristic LA's exposure (a) and query error vs l;
- t-closeness extension (Fig. 4.10): sex semi-sensitive too, under t = 0.2, the rest under l.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.localanatomy import Principle, deal, local_anatomy
from dbanon.core.flags import draw
from dbanon.core.hierarchy import Hierarchy
from dbanon.experiments import provenance, standins
from dbanon.lifecycle.declare import release_spec
from dbanon.metrics import queries
from dbanon.metrics.boxes import Attribute, Bucketed
from dbanon.metrics.personal import View, per_person, summary

LS = (5, 8, 10, 12, 15, 18, 20)
DENSITIES = (0.1, 0.2, 0.3, 0.4)
ROWS = 17629
QUERIES = 1000
T = 0.2
QI = ["sex", "relationship", "marital_status", "race", "education", "hours_per_week"]
SEMI = ["age", "occupation"]
NUMERIC = {"age", "hours_per_week", "salary"}
SALARY = "salary"


@dataclass
class Data:
    """The sample as codes: attributes (QIs then semi-sensitive ones) and the salary."""

    attrs: list[Attribute]
    codes: np.ndarray  # int64 (n, d): value codes in each attribute's domain order
    salary: np.ndarray  # float64 (n,)
    raw: dict[str, np.ndarray]

    @property
    def n(self) -> int:
        return int(self.codes.shape[0])

    def column(self, name: str) -> int:
        return [a.name for a in self.attrs].index(name)


def load(rows: int, columns: Sequence[str], seed: int, occupation: str = standins.DEFAULT) -> Data:
    """The sample; occupation is the stand-in named (dbanon.experiments.standins: by default
    one that embeds no published QI)."""
    from dbanon.data.salary import SALARY_SEED, salary_columns

    raw = salary_columns(rows, SALARY_SEED + seed, standins.EXTRA)
    raw["occupation"] = standins.OCCUPATION[occupation](raw)
    attrs, codes = [], []
    for name in columns:
        values = raw[name]
        numeric = name in NUMERIC
        domain, inv = np.unique(values.astype(np.float64) if numeric else values.astype(str),
                                return_inverse=True)  # fmt: skip
        attrs.append(Attribute(name, numeric, domain if numeric else domain.astype(object)))
        codes.append(inv.reshape(-1))
    return Data(attrs, np.column_stack(codes).astype(np.int64),
                raw[SALARY].astype(np.float64), raw)  # fmt: skip


def workload(data: Data, n: int, seed: int) -> queries.Workload:
    source = bucketed(data, data.codes, data.codes, {}, np.arange(data.n), per_row=True)
    return queries.workload(data.attrs, source, SALARY, n, seed)


def bucketed(
    data: Data, lo: np.ndarray, hi: np.ndarray, flagged: dict[int, np.ndarray],
    salary_bucket: np.ndarray, per_row: bool = False,
) -> Bucketed:  # fmt: skip
    """A release as boxes and buckets. Cells are code intervals [lo, hi] (a categorical
    interval other than a point means '*'); a flagged cell (`flagged[j]`: bucket id per row,
    0 none) stands for its bucket's values. `salary_bucket` gives each row's salary bucket;
    with `per_row` each row is its own bucket (a generalised table)."""
    n = data.n
    nums = [j for j, a in enumerate(data.attrs) if a.numeric]
    out_lo = np.empty((n, len(nums)))
    out_hi = np.empty((n, len(nums)))
    cats = []
    for j, a in enumerate(data.attrs):
        ids = flagged.get(j)
        clo, chi = lo[:, j].copy(), hi[:, j].copy()
        if ids is not None and (ids > 0).any():
            inb = ids > 0
            g = int(ids.max()) + 1
            bmin = np.full(g, np.iinfo(np.int64).max)
            bmax = np.full(g, -1)
            np.minimum.at(bmin, ids[inb], data.codes[inb, j])
            np.maximum.at(bmax, ids[inb], data.codes[inb, j])
            clo[inb], chi[inb] = bmin[ids[inb]], bmax[ids[inb]]
        if a.numeric:
            i = nums.index(j)
            out_lo[:, i], out_hi[:, i] = a.domain[clo], a.domain[chi]
            continue
        size = len(a.domain)
        mask = np.zeros((n, size), dtype=bool)
        point = clo == chi
        mask[np.flatnonzero(point), clo[point]] = True
        mask[~point] = True
        if ids is not None and (ids > 0).any():
            inb = ids > 0
            member = np.zeros((int(ids.max()) + 1, size), dtype=bool)
            member[ids[inb], data.codes[inb, j]] = True
            mask[inb] = member[ids[inb]]
        cats.append(mask)
    values = np.asarray(data.salary, dtype=object)
    if per_row:
        return Bucketed(out_lo, out_hi, cats, np.arange(n), values, np.arange(n + 1))
    _, bucket = np.unique(salary_bucket, return_inverse=True)
    bucket = bucket.reshape(-1)
    order = np.argsort(bucket, kind="stable")
    offsets = np.searchsorted(bucket[order], np.arange(int(bucket.max()) + 2))
    return Bucketed(out_lo, out_hi, cats, bucket, values[order], offsets)


def view(data: Data, known: np.ndarray, lo: np.ndarray, hi: np.ndarray,
         buckets: dict[int, np.ndarray], salary_bucket: np.ndarray) -> View:  # fmt: skip
    """The attacker's view: flagged cells (bucket id > 0) NULL; semi-sensitive attributes
    (known False somewhere) are exposure targets; salary too."""
    vlo, vhi = lo.astype(np.float64), hi.astype(np.float64)
    for j, ids in buckets.items():
        vlo[ids > 0, j] = np.nan
        vhi[ids > 0, j] = np.nan
    targets: dict[object, tuple[np.ndarray, np.ndarray]] = {}
    for j in np.flatnonzero(~known.all(axis=0)).tolist():
        targets[data.attrs[j].name] = (buckets.get(j, np.zeros(data.n, np.int64)),
                                       data.codes[:, j])  # fmt: skip
    salary_codes = np.unique(data.salary, return_inverse=True)[1].reshape(-1)
    targets[SALARY] = (salary_bucket, salary_codes)
    v = View(data.codes, known, vlo, vhi, {})
    v.buckets = {(data.column(k) if k != SALARY else k): t for k, t in targets.items()}
    return v


def anatomy_release(data: Data, ell: int, seed: int) -> np.ndarray:
    """Anatomy's salary buckets (1..g) by the sorted round-robin deal (dbanon.setlogic.anatomy)."""
    codes = np.unique(data.salary, return_inverse=True)[1].reshape(-1)
    return deal(codes, ell, np.random.default_rng(seed)) + 1


def la_release(
    data: Data, flags: dict[str, np.ndarray], ell: int, heuristic: bool, seed: int,
    principles: dict[str, Principle] | None = None, rows: np.ndarray | None = None,
) -> tuple[dict[int, np.ndarray], np.ndarray, dict[str, Principle]]:  # fmt: skip
    """Local anatomy's buckets per flagged attribute (column -> ids), the salary's, and the
    principle each attribute got. l is never capped: an attribute whose flagged values are
    not l-eligible is infeasible at this l, absent from the principles returned, and its
    flagged cells are released as one bucket of all of them (results report no exposure for
    it: a gap, with `feasible_<column>` false)."""
    keep = np.ones(data.n, dtype=bool) if rows is None else rows
    cols = {name: (data.codes[keep, data.column(name)], flags[name][keep]) for name in flags}
    cols[SALARY] = (data.salary[keep], np.ones(int(keep.sum()), dtype=bool))
    given = principles or {}
    rule = {name: given.get(name, Principle("l", ell)) for name in cols
            if name in given or eligible_l(*cols[name]) >= ell}  # fmt: skip
    if SALARY not in rule:
        raise ValueError(f"the salary is not {ell}-eligible")
    got = local_anatomy({n: c for n, c in cols.items() if n in rule}, rule, heuristic, seed)
    for name in cols:
        if name not in rule:
            got[name] = cols[name][1].astype(np.int64)  # one bucket: every flagged cell
    out = {}
    for name in flags:
        ids = np.zeros(data.n, dtype=np.int64)
        ids[keep] = got[name]
        out[data.column(name)] = ids
    salary = np.zeros(data.n, dtype=np.int64)
    salary[keep] = got[SALARY]
    return out, salary, rule


# --- the real release path: every local-anatomy release is published and read back -----------

SCHEMA = "dbanon_exp_la"  # the experiment's source tables and flags (never `anon`)
TARGET = "dbanon_exp_la_release"  # where its releases are published
KEY = "id"


def load_source(conn: psycopg.Connection, data: Data) -> str:
    """The sample as a table SCHEMA.la_<n>_<digest> (id, QIs, semi-sensitive, salary)."""
    import hashlib

    digest = hashlib.sha1(np.ascontiguousarray(data.codes).tobytes()).hexdigest()[:10]
    table = f"la_{data.n}_{digest}"
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(SCHEMA)))
    exists = conn.execute("SELECT to_regclass(%s)", [f"{SCHEMA}.{table}"]).fetchone()[0]
    if exists is None:
        cols = [sql.SQL("{} {}").format(sql.Identifier(a.name),
                                        sql.SQL("float8" if a.numeric else "text"))
                for a in data.attrs]  # fmt: skip
        conn.execute(sql.SQL("CREATE TABLE {} ({} int PRIMARY KEY, {}, {} float8)").format(
            sql.Identifier(SCHEMA, table), sql.Identifier(KEY), sql.SQL(", ").join(cols),
            sql.Identifier(SALARY)))  # fmt: skip
        names = [KEY, *(a.name for a in data.attrs), SALARY]
        values = [data.attrs[j].domain[data.codes[:, j]] for j in range(len(data.attrs))]
        with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(
                sql.Identifier(SCHEMA, table),
                sql.SQL(", ").join(map(sql.Identifier, names)))) as copy:  # fmt: skip
            for i in range(data.n):
                copy.write_row([i, *(v[i] for v in values), float(data.salary[i])])
    conn.commit()
    return f"{SCHEMA}.{table}"


def load_flags(conn: psycopg.Connection, source: str, flags: dict[str, np.ndarray],
               tag: str) -> str:  # fmt: skip
    """The flags relation (id, column_name) of one draw, as a DBA would keep it."""
    table = f"{source.split('.')[1]}_flags_{tag}"
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(SCHEMA, table)))
    conn.execute(sql.SQL("CREATE TABLE {} ({} int, column_name text)").format(
        sql.Identifier(SCHEMA, table), sql.Identifier(KEY)))  # fmt: skip
    with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} FROM STDIN").format(
            sql.Identifier(SCHEMA, table))) as copy:  # fmt: skip
        for col, mask in flags.items():
            for i in np.flatnonzero(mask).tolist():
                copy.write_row([i, col])
    conn.commit()
    return f"{SCHEMA}.{table}"


@dataclass
class Published:
    """A local-anatomy release read back from its relations: per released row the codes it
    shows (-1 where the cell is flagged, NULL), per bucketised column (index, or SALARY) each
    row's bucket (0: none) and per bucket its values' codes (the ST), and the attributes that
    were released bucketised under l (the feasible ones)."""

    shown: np.ndarray  # int64 (rows, d)
    ids: dict[object, np.ndarray]
    st: dict[object, dict[int, list[int]]]
    used: dict[str, Principle]


def publish_la(
    conn: psycopg.Connection, source: str, flags_rel: str, data: Data,
    flags: dict[str, np.ndarray], ell: int, heuristic: bool, seed: int,
    principles: dict[str, Principle] | None = None,
) -> Published:  # fmt: skip
    """Publish local anatomy of the source through dbanon's lifecycle (validation, the
    method, the independent gate) and read the released relations back. l is never capped:
    an attribute whose flagged values are not l-eligible is not released at this l (its
    column left out of the release and of its flags), reported infeasible by the caller."""
    from dbanon.lifecycle.publish import publish

    given = principles or {}
    feasible = [c for c in flags if c in given
                or eligible_l(data.codes[:, data.column(c)], flags[c]) >= ell]  # fmt: skip
    view_name = sql.Identifier(SCHEMA, "flags_now")
    conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(view_name))
    conn.execute(sql.SQL("CREATE VIEW {} AS SELECT * FROM {} WHERE column_name = ANY({})").format(
        view_name, sql.Identifier(*flags_rel.split(".")), sql.Literal(feasible)))  # fmt: skip
    conn.commit()
    qi = [a.name for a in data.attrs if a.name not in flags or a.name in feasible]
    options: dict[str, Any] = {"flags": f"{SCHEMA}.flags_now", "heuristic": heuristic,
                               "seed": seed}  # fmt: skip
    if given:
        options["principle"] = ",".join(f"{c}={p.kind}:{p.value:g}" for c, p in given.items())
    name = "exp_la"
    spec = release_spec(
        name, source, KEY, qi, sensitive=[SALARY], method="localanatomy", l=ell,
        options=options, target=f"{TARGET}.{name}",
    )  # fmt: skip
    publish(conn, spec, replace=True)
    return read_release(conn, data, name, qi, [*feasible, SALARY],
                        {c: given.get(c, Principle("l", ell)) for c in feasible})  # fmt: skip


def read_release(conn: psycopg.Connection, data: Data, name: str, qi: list[str],
                 bucketised: list[str], used: dict[str, Principle]) -> Published:  # fmt: skip
    """The released relations NAME, NAME_<col>_idt and NAME_<col>_st as codes."""
    rel = sql.Identifier(TARGET, name)
    rows = conn.execute(sql.SQL("SELECT row_id, {} FROM {}").format(
        sql.SQL(", ").join(map(sql.Identifier, qi)), rel)).fetchall()  # fmt: skip
    where = {int(r[0]): i for i, r in enumerate(rows)}
    shown = np.full((len(rows), len(data.attrs)), -1, dtype=np.int64)
    for j, a in enumerate(data.attrs):
        if a.name not in qi:
            continue
        col = qi.index(a.name) + 1
        index = {float(v) if a.numeric else str(v): i for i, v in enumerate(a.domain.tolist())}
        shown[:, j] = [-1 if r[col] is None else index[float(r[col]) if a.numeric else r[col]]
                       for r in rows]  # fmt: skip
    salary_domain = np.unique(data.salary)
    ids: dict[object, np.ndarray] = {}
    st: dict[object, dict[int, list[int]]] = {}
    for c in bucketised:
        key: object = SALARY if c == SALARY else data.column(c)
        dom = salary_domain if c == SALARY else data.attrs[data.column(c)].domain
        index = {float(v) if c == SALARY or data.attrs[int(key)].numeric else str(v): i
                 for i, v in enumerate(dom.tolist())}  # type: ignore[arg-type]  # fmt: skip
        num = c == SALARY or data.attrs[int(key)].numeric  # type: ignore[arg-type]
        got = np.zeros(len(rows), dtype=np.int64)
        for r, b in conn.execute(sql.SQL("SELECT row_id, bucket_id FROM {}").format(
                sql.Identifier(TARGET, f"{name}_{c}_idt"))):  # fmt: skip
            got[where[int(r)]] = int(b)
        ids[key] = got
        st[key] = {}
        for b, v in conn.execute(sql.SQL("SELECT bucket_id, {} FROM {}").format(
                sql.Identifier(c), sql.Identifier(TARGET, f"{name}_{c}_st"))):  # fmt: skip
            st[key].setdefault(int(b), []).append(index[float(v) if num else str(v)])
    conn.rollback()
    return Published(shown, ids, st, used)


def completed(
    data: Data, pub: Published
) -> tuple[Data, np.ndarray, np.ndarray, dict[int, np.ndarray], np.ndarray]:
    """The release as the in-memory metrics read one: each bucket's values (its ST) dealt to
    its rows in any order, which changes no box, bucket or multiset (query error reads only
    those). Returns (rows as Data, their low and high codes, bucket ids per QI column, salary
    buckets); an attribute left out of the release reads as its whole domain ('*')."""
    codes = pub.shown.copy()
    salary_domain = np.unique(data.salary)
    salary = np.empty(len(codes))
    for key, ids in pub.ids.items():
        for b, vals in pub.st[key].items():
            members = np.flatnonzero(ids == b)
            if key == SALARY:
                salary[members] = salary_domain[vals]
            else:
                codes[members, int(key)] = vals  # type: ignore[call-overload]
    lo, hi = codes.copy(), codes.copy()
    for j, a in enumerate(data.attrs):
        if (pub.shown[:, j] == -1).all() and j not in pub.ids:
            lo[:, j], hi[:, j] = 0, len(a.domain) - 1
            codes[:, j] = 0
    buckets = {int(k): v for k, v in pub.ids.items() if k != SALARY}  # type: ignore[call-overload]
    return Data(data.attrs, codes, salary, {}), lo, hi, buckets, pub.ids[SALARY]


def released_exposure(data: Data, known: np.ndarray, pub: Published,
                      attacker: str) -> dict[object, np.ndarray]:  # fmt: skip
    """p(t, s_t) of each target per bucketised attribute (dbanon.metrics.personal's definition)
    for the people of the source against the published rows: matches by the people's known values
    (attacker (a), or (b) with elimination), a flagged value's chance its bucket share."""
    from dbanon.metrics.personal import View, candidates, eliminate

    released = [j for j in range(len(data.attrs)) if not (pub.shown[:, j] == -1).all()
                or j in pub.ids]  # fmt: skip
    lo = np.where(pub.shown[:, released] >= 0, pub.shown[:, released], np.nan).astype(float)
    view = View(data.codes[:, released], known[:, released], lo, lo.copy(), {})
    cls, cands = candidates(view)
    if attacker == "b":
        cands = eliminate(cls, cands)
    truth: dict[object, np.ndarray] = {SALARY: np.unique(data.salary, return_inverse=True)[1]}
    out: dict[object, np.ndarray] = {}
    for key, ids in pub.ids.items():
        s_of = truth[SALARY] if key == SALARY else data.codes[:, int(key)]  # type: ignore[call-overload]
        share = {(b, v): n / len(vals) for b, vals in pub.st[key].items()
                 for v, n in zip(*np.unique(vals, return_counts=True), strict=True)}  # fmt: skip
        targets = (np.arange(data.n) if key == SALARY
                   else np.flatnonzero(~known[:, int(key)]))  # type: ignore[call-overload]  # fmt: skip
        each = np.zeros(len(targets))
        for n, t in enumerate(targets.tolist()):
            rows = cands[cls[t]]
            rows = rows[ids[rows] > 0]
            if len(rows):
                s = int(s_of[t])
                each[n] = float(np.mean([share.get((int(b), s), 0.0) for b in ids[rows]]))
        out[key] = each
    return out


def eligible_l(values: np.ndarray, flagged: np.ndarray) -> int:
    """The largest l the flagged values are l-eligible for: above it the attribute is
    infeasible (reported as such, never capped)."""
    counts = np.unique(values[flagged], return_counts=True)[1]
    return int(counts.sum() // counts.max()) if len(counts) else 0


def qi_arrays(data: Data) -> QIArrays:
    numeric, categorical = [], []
    for j, a in enumerate(data.attrs):
        if a.numeric:
            numeric.append(a.domain[data.codes[:, j]])
        else:
            h = Hierarchy.flat(a.name, [str(v) for v in a.domain.tolist()])
            lookup = h.leaves
            leaf = np.array([lookup[str(v)] for v in a.domain.tolist()], dtype=np.int32)
            categorical.append((leaf[data.codes[:, j]], h))
    return QIArrays.build(numeric, categorical, n=data.n)


def group_boxes(data: Data, gid: np.ndarray, flagged: np.ndarray) -> tuple[np.ndarray, ...]:
    """Code intervals of each row's group per attribute (flagged cells: their own code, to be
    replaced by the bucket's values); suppressed rows (gid -1): '*' everywhere."""
    n, d = data.codes.shape
    lo, hi = data.codes.copy(), data.codes.copy()
    kept = gid >= 0
    g = np.unique(gid[kept], return_inverse=True)[1].reshape(-1)
    groups = int(g.max()) + 1 if len(g) else 0
    for j, a in enumerate(data.attrs):
        live = ~flagged[kept, j]
        gmin = np.full(groups, np.iinfo(np.int64).max)
        gmax = np.full(groups, -1)
        np.minimum.at(gmin, g[live], data.codes[kept, j][live])
        np.maximum.at(gmax, g[live], data.codes[kept, j][live])
        cl, ch = lo[kept, j], hi[kept, j]
        cl[live], ch[live] = gmin[g[live]], gmax[g[live]]
        if not a.numeric:  # flat: a mixed group shows '*'
            mixed = live & (cl != ch)
            cl[mixed], ch[mixed] = 0, len(a.domain) - 1
        lo[kept, j], hi[kept, j] = cl, ch
        lo[~kept, j], hi[~kept, j] = 0, len(a.domain) - 1
    return lo, hi


def mondrian_release(data: Data, ell: int) -> tuple[np.ndarray, np.ndarray]:
    from dbanon.algorithms.mondrian import mondrian

    codes = np.unique(data.salary, return_inverse=True)[1].reshape(-1)
    gid = mondrian(qi_arrays(data), ell, sensitive=codes, l=ell)
    return group_boxes(data, gid, np.zeros_like(data.codes, dtype=bool))


def _write(out: Path, name: str, results: list[dict[str, Any]]) -> str:
    path = out / f"{name}.csv"
    fields = list(dict.fromkeys(k for r in results for k in r))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(results)
    return str(path)


def plot(results: list[dict[str, Any]], series: str, field: str, label: str, title: str,
         path: Path, x: str = "l", log: bool = False) -> str:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in dict.fromkeys(r[series] for r in results):
        pts = sorted((r[x], r[field]) for r in results if r[series] == name and r.get(field)
                     is not None)  # fmt: skip
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=str(name))
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(label)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def prepare(
    out_dir: str | Path, rows: int, columns: list[str], n_queries: int, seed: int,
    progress: Callable[[str], None] | None,
) -> tuple[Callable[[str], None], Path, Data, queries.Workload]:  # fmt: skip
    """What every run starts from: progress, the output folder, the data and its workload."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = load(rows, columns, seed)
    return progress or (lambda _msg: None), out, data, workload(data, n_queries, seed)


def run(
    conn: psycopg.Connection, out_dir: str | Path, ls: Sequence[int] = LS,
    densities: Sequence[float] = DENSITIES, rows: int = ROWS, n_queries: int = QUERIES,
    seed: int = 0, progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Every series of the module docstring; writes CSVs and PNGs into `out_dir`. Every
    local-anatomy release is published through dbanon's lifecycle in `conn` and read back."""
    say, out, data, work = prepare(out_dir, rows, [*QI, *SEMI], n_queries, seed, progress)
    source = load_source(conn, data)

    def released(flags: dict[str, np.ndarray], flags_rel: str, ell: int, heuristic: bool,
                 principles: dict[str, Principle] | None = None) -> tuple[Published, Bucketed]:
        pub = publish_la(conn, source, flags_rel, data, flags, ell, heuristic, seed, principles)
        got, lo, hi, buckets, sal = completed(data, pub)
        return pub, bucketed(got, lo, hi, buckets, sal)

    semi = [data.column(c) for c in SEMI]
    exposure_rows: list[dict[str, Any]] = []
    error_rows: list[dict[str, Any]] = []

    def qerr(b: Bucketed) -> float:
        return round(queries.query_error(b, data.attrs, work, SALARY)["query_error"], 5)

    def semi_mean(exp: dict[object, float],
                  used: dict[str, Principle] | None = None) -> float | None:  # fmt: skip
        """Mean over the semi-sensitive attributes (with `used`, the feasible ones; None, a
        gap, when none is)."""
        got = [exp[j] for c, j in zip(SEMI, semi, strict=True)
               if j in exp and (used is None or c in used)]  # fmt: skip
        return round(float(np.mean(got)), 5) if got else None

    for density in densities:
        flags = draw(data.n, SEMI, density, seed)
        flags_rel = load_flags(conn, source, flags, f"d{round(density * 100)}_s{seed}")
        known = np.ones_like(data.codes, dtype=bool)
        for c in SEMI:
            known[flags[c], data.column(c)] = False
        for ell in ls:
            say(f"density {density:.0%}, l={ell}: publish")
            pub, b = released(flags, flags_rel, ell, True)
            for attacker in ("a", "b") if density == 0.2 else ("a",):
                e, worst = summary(released_exposure(data, known, pub, attacker))
                exposure_rows.append({"series": f"LocalAnatomy_{attacker}", "density": density,
                                      "l": ell, "semi_sensitive": semi_mean(e, pub.used),
                                      "sensitive": round(e[SALARY], 5),
                                      "sensitive_max": round(worst[SALARY], 5),
                                      **per_attribute(data, e, pub.used, True, worst)})  # fmt: skip
            error_rows.append({"series": "HeuristicLocalAnatomy", "density": density, "l": ell,
                               "query_error": qerr(b)})  # fmt: skip
            if density != 0.2:
                continue
            error_rows.append({"series": "LocalAnatomy", "density": density, "l": ell,
                               "query_error": qerr(released(flags, flags_rel, ell, False)[1])})
            asal = anatomy_release(data, ell, seed)
            av = view(data, known, data.codes, data.codes, {}, asal)
            e, worst = summary(per_person(av, "a"))
            exposure_rows.append({"series": "Anatomy", "density": density, "l": ell,
                                  "semi_sensitive": semi_mean(e),
                                  "sensitive": round(e[SALARY], 5),
                                  "sensitive_max": round(worst[SALARY], 5),
                                  **per_attribute(data, e, {}, worst=worst)})  # fmt: skip
            error_rows.append({"series": "Anatomy", "density": density, "l": ell,
                               "query_error": qerr(bucketed(data, data.codes, data.codes, {},
                                                            asal))})  # fmt: skip
            lo, hi = mondrian_release(data, ell)
            error_rows.append({"series": "Mondrian", "density": density, "l": ell,
                               "query_error": qerr(bucketed(data, lo, hi, {}, np.arange(data.n),
                                                            per_row=True))})  # fmt: skip
    # Fig. 4.10: sex semi-sensitive under t = 0.2.
    t_rows: list[dict[str, Any]] = []
    for density in densities:
        flags = draw(data.n, ["sex", *SEMI], density, seed + 1)
        flags_rel = load_flags(conn, source, flags, f"t{round(density * 100)}_s{seed}")
        for ell in ls:
            say(f"t-closeness extension: density {density:.0%}, l={ell}: publish")
            pub, b = released(flags, flags_rel, ell, True, {"sex": Principle("t", T)})
            t_rows.append({"series": f"density {density:.0%}", "density": density, "l": ell,
                           "query_error": qerr(b),
                           **{f"feasible_{c}": c in pub.used for c in SEMI}})  # fmt: skip
    files = [_write(out, "exposure", exposure_rows), _write(out, "query_error", error_rows),
             _write(out, "tcloseness", t_rows)]  # fmt: skip
    files.append(str(provenance.write(out, "localanatomy", {
        "rows": data.n, "ls": list(ls), "densities": list(densities), "queries": n_queries,
        "seed": seed})))  # fmt: skip
    at20 = [r for r in exposure_rows if r["density"] == 0.2]
    plots = [
        plot(at20, "series", "semi_sensitive", "mean exposure",
             "Fig 4.3: semi-sensitive attributes (density 20%)", out / "fig4_3_exposure_semi.png"),
        plot(at20, "series", "sensitive", "mean exposure", "Fig 4.4: salary (density 20%)",
             out / "fig4_4_exposure_salary.png"),
        plot([r for r in error_rows if r["density"] == 0.2 and r["series"] != "Anatomy"],
             "series", "query_error", "query error (log)",
             "Fig 4.5: Mondrian vs local anatomy (density 20%)", out / "fig4_5_error.png",
             log=True),
        plot([r for r in error_rows if r["density"] == 0.2 and r["series"] != "Mondrian"],
             "series", "query_error", "query error",
             "Fig 4.6: Anatomy vs local anatomy (density 20%)", out / "fig4_6_error.png"),
        plot([{**r, "d": f"{r['density']:.0%}"} for r in exposure_rows
              if r["series"] == "LocalAnatomy_a"], "d", "semi_sensitive", "mean exposure",
             "Fig 4.7: heuristic LA exposure by density", out / "fig4_7_density_exposure.png"),
        plot([{**r, "d": f"{r['density']:.0%}"} for r in error_rows
              if r["series"] == "HeuristicLocalAnatomy"], "d", "query_error", "query error",
             "Fig 4.8: heuristic LA query error by density", out / "fig4_8_density_error.png"),
        plot(t_rows, "series", "query_error", "query error",
             "Fig 4.10: sex under t=0.2, others under l", out / "fig4_10_tcloseness.png"),
    ]  # fmt: skip
    return {"rows": data.n, "queries": n_queries, "files": files, "plots": plots,
            "exposure": exposure_rows, "query_error": error_rows, "tcloseness": t_rows,
            "findings": findings(exposure_rows, error_rows, ls)}  # fmt: skip


def per_attribute(data: Data, e: dict[object, float], used: dict[str, Principle],
                  local: bool = False, worst: dict[object, float] | None = None,
                  ) -> dict[str, Any]:  # fmt: skip
    """Exposure of each semi-sensitive attribute (the mean the thesis plots and, with `worst`, the
    most exposed person's, which the principle bounds) and the l its buckets were built for; for
    a local-anatomy release, an attribute infeasible at the run's l has no exposure (a gap)."""
    out: dict[str, Any] = {}
    for c in SEMI:
        feasible = c in used or not local
        j = data.column(c)
        out[f"exposure_{c}"] = round(e.get(j, float("nan")), 5) if feasible else None
        if worst is not None:
            out[f"exposure_max_{c}"] = round(worst.get(j, float("nan")), 5) if feasible else None
        out[f"l_{c}"] = int(used[c].value) if c in used else None
        if local:
            out[f"feasible_{c}"] = feasible
    return out


def findings(exposure_rows: list[dict[str, Any]], error_rows: list[dict[str, Any]],
             ls: Sequence[int]) -> dict[str, Any]:  # fmt: skip
    """The thesis's claims of §4.2, each with the measured numbers."""
    def at(rows: list[dict[str, Any]], series: str, field: str, density: float = 0.2
           ) -> dict[int, float]:  # fmt: skip
        return {r["l"]: r[field] for r in rows if r["series"] == series
                and r["density"] == density}  # fmt: skip

    anat = at(exposure_rows, "Anatomy", "semi_sensitive")
    err = {s: at(error_rows, s, "query_error") for s in
           ("Mondrian", "Anatomy", "LocalAnatomy", "HeuristicLocalAnatomy")}  # fmt: skip
    below = [ell for ell in ls if err["HeuristicLocalAnatomy"].get(ell, 1e9)
             < err["Anatomy"].get(ell, -1)]  # fmt: skip
    def within(series: str, density: float | None = None) -> bool:
        """Every feasible attribute's exposure within 1/l of the l asked for, for the most
        exposed person (infeasible ones are reported, not judged)."""
        return all(
            (not r[f"feasible_{c}"] or r[f"exposure_max_{c}"] <= 1 / r["l"] + 1e-9)
            and r["sensitive_max"] <= 1 / r["l"] + 1e-9
            for r in exposure_rows for c in SEMI
            if r["series"] == series and (density is None or r["density"] == density)
        )

    infeasible = {c: sorted({r["l"] for r in exposure_rows
                             if r.get(f"feasible_{c}") is False}) for c in SEMI}  # fmt: skip
    return {
        "infeasible_l": infeasible,  # per attribute, the l its flagged values cannot reach
        "anatomy_semi_exposure": anat,
        "la_within_1_over_l_a": within("LocalAnatomy_a", 0.2),
        "la_within_1_over_l_b": within("LocalAnatomy_b", 0.2),
        "la_within_1_over_l_all_densities": within("LocalAnatomy_a"),
        "la_below_mondrian": all(err["LocalAnatomy"][ell] < err["Mondrian"][ell]
                                 for ell in err["Mondrian"]),
        "plain_la_above_anatomy": all(err["LocalAnatomy"][ell] > err["Anatomy"][ell]
                                      for ell in err["Anatomy"]),
        "heuristic_below_anatomy_for_l": below,
    }

"""The shared path of methods that perturb values instead of grouping rows (ina, noise).

The perturbed columns are the release's `--qi` (alias `--columns`), numeric, never NULL.
One binary COPY streams every row's key (as text), perturbed columns (float8) and declared
`--sensitive` and `--keep` columns (in their own binary form) into arrays (dbanon.db.stream),
with each row's rank in the linkage sample's secret order. Batch by batch (the batches the
figures always merged), the keyed noise is computed in compiled code (dbanon.algorithms.prf,
hashlib's BLAKE2b bit for bit), the method's `noise` turns it into perturbed values (pure
code, dbanon.algorithms.ina) and data security and linkage are accumulated
(dbanon.metrics.security, dbanon.metrics.linkage). The release is then written from
the arrays by one binary COPY (dbanon.db.rows): a random 63-bit row id drawn per run
(`dbanon_row`), the perturbed columns, the sensitive and kept ones as they came (typed as they
are; never the key, never a column nobody declared, so not one added to the source later
either: dbanon.lifecycle.identifying), rows in the order of their ids, so the order says
nothing of the source's. No staging table, no join with the source, no sort on the server.
`--drop` is deprecated: what is not declared is not released; it is accepted (old specs) and
refused on a declared one.

The noise is a keyed pseudo-random function of a secret and the row key (prf_uniform): per row
and column for `noise` (not the value: a known change then narrows nothing across releases),
per tuple value for `ina` (its noise size depends on the whole tuple). A state records its
keying; one kept from before keeps the keying it was drawn with. The secret, the keying, the
normalisation, the noise floor and (ina) the reference points are kept in the catalog
(dbanon.noise_state, never granted) with the row map (dbanon.noise_map_<release id>:
dbanon_row -> key, for `dbanon compare` and the checks, which pair rows through the run's map
before it replaces the old one). With `--refresh-policy persist` a refresh reuses them, so an
unchanged value gets exactly the noise it had (keeping releases averages nothing away); with
`noise` a changed one keeps its noise too (the difference of two releases is the true change),
with `ina` a changed tuple gets fresh noise. Row ids and so the row order are drawn anew every
run: they link no row across releases (the unchanged values still do, by design: docs/noise.md).
`regroup` (or `refresh --regroup`) draws everything anew: averaging r releases then divides
the noise variance of unchanged rows by r.

The floor (`--noise-floor`): no value moves by less than a share of its column's scale; the
default is the side of the cell a row would own if the rows filled the normalised box evenly,
n^(-1/m) of the column's range. Every run measures linkage (dbanon.metrics.linkage) on a sample
of released rows drawn with the secret: the share whose nearest original row is their own.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from abc import abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import psycopg
from psycopg import sql

from dbanon.db import catalog
from dbanon.db.ahead import ahead
from dbanon.db.aside import Aside
from dbanon.db.parts import copy_parts, where
from dbanon.db.rows import Dictionary, Field, copy_rows, equal_as_bytes
from dbanon.db.settings import analyze_stage
from dbanon.db.stream import Keys, key_field
from dbanon.errors import DbanonError, idents, quote_ident
from dbanon.methods.base import BuildContext, Built, Check, Method, Option
from dbanon.methods.grouped_rows import as_text, retype
from dbanon.metrics.linkage import SAMPLE, Linkage
from dbanon.metrics.security import Security
from dbanon.models.base import CheckResult

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved

ROW = "dbanon_row"
BATCH = 20_000
AHEAD = 2  # batches perturbed at once, in threads beside the one that sums them
NORMALISE = Option(
    "normalise", str, "range", "Per-column scale of distances and noise: range or std.",
    ("range", "std"),
)  # fmt: skip
DROP = Option(
    "drop", str, None,
    "Deprecated: a column nobody declared (--columns, --sensitive, --keep) is never released.",
)  # fmt: skip
NOISE_FLOOR = Option(
    "noise_floor", float, None,
    "Least move of every value, a share of its column's scale (0: none; default: n^(-1/m) of "
    "the range, the side of a row's cell if rows filled the box evenly).",
    low=0, high=0.5,
)  # fmt: skip
INTEGRAL = Option(
    "integral", bool, False,
    "Release integer columns as whole numbers of their own type (each perturbed value rounded "
    "to the nearest); other numeric columns stay float8.",
)  # fmt: skip
CLAMP = Option(
    "clamp", bool, False,
    "Keep every perturbed value within its column's [min, max] in the source at this run "
    "(durations stay non-negative); the release then shows each bound a value was clamped to "
    "(docs/noise.md).",
)  # fmt: skip
# Options applied to the noisy values, not to the noise: a kept state serves any of them.
SHAPING = ("integral", "clamp")
# The integer types `--integral` keeps, as format_type() names them: the cast and the bounds a
# value must be within (int8's upper bound as the largest float8 below 2^63).
INTEGER_TYPES: dict[str, tuple[str, float, float]] = {
    "smallint": ("int2", -(2.0**15), 2.0**15 - 1),
    "integer": ("int4", -(2.0**31), 2.0**31 - 1),
    "bigint": ("int8", -(2.0**63), 2.0**63 - 1024),
}
POLICY = Option(
    "refresh_policy", str, "persist",
    "On refresh: the same secret (and reference points), so unchanged rows keep their noise "
    "(persist), or new noise (regroup: averaging releases then shrinks the noise).",
    ("persist", "regroup"),
)  # fmt: skip


@dataclass
class Shaping:
    """What `--clamp` and `--integral` do to the noisy values of a run, after the noise: the
    noise itself is untouched (still keyed per row), so an unchanged row keeps its released
    value across refreshes as long as the bounds hold; a row whose value was clamped to a bound
    that later widens shows its noisy value then, which the later release alone shows anyway."""

    low: np.ndarray  # per column: the least value released (-inf: none)
    high: np.ndarray
    integral: np.ndarray  # per column: rounded to a whole number

    def apply(self, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The released values of a batch, and per column how many were clamped."""
        clipped = np.clip(out, self.low[None, :], self.high[None, :])
        clamped = (clipped != out).sum(0)
        return np.where(self.integral[None, :], np.rint(clipped), clipped), clamped


@dataclass
class NoiseState:
    """What the noise of a run depends on besides the data; kept for refreshes."""

    secret: bytes
    alpha: np.ndarray  # per-column normalisation
    extra: dict[str, Any]  # the method's own (ina: the reference points)
    signature: str  # the spec it was drawn for: reused only by a run of the same spec

    @property
    def floor(self) -> np.ndarray:
        """The least move of each column, a share of its scale (zeros: no floor)."""
        return np.array(self.extra.get("floor") or np.zeros(len(self.alpha)), dtype=np.float64)

    def as_json(self) -> str:
        return json.dumps(
            {"alpha": self.alpha.tolist(), "extra": self.extra, "signature": self.signature}
        )


def stats(conn: psycopg.Connection, r: Resolved) -> list[tuple[float, float, float]]:
    """(min, max, population std) of every perturbed column, in one scan."""
    cols = [sql.SQL("min({c}::float8), max({c}::float8), stddev_pop({c}::float8)").format(
        c=c.ident) for c in r.qi]  # fmt: skip
    row = conn.execute(
        sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(cols), r.source.ident)
    ).fetchone()
    return [(row[3 * i], row[3 * i + 1], row[3 * i + 2] or 0.0) for i in range(len(r.qi))]


def released_columns(conn: psycopg.Connection, r: Resolved) -> list[str]:
    """The source's columns as released, in its order: the perturbed, sensitive and kept ones
    only (never the key; the deprecated `--drop` cannot drop a declared column)."""
    cols = catalog.columns(conn, r.source)
    declared = {c.name for c in [*r.qi, *r.sensitive, *r.keep]}
    dropped = catalog.parse_list(r.options["drop"]) if r.options.get("drop") else []
    catalog.require_columns(cols, r.source, dropped)
    clash = declared & set(dropped)
    if clash:
        raise DbanonError(
            f"column {quote_ident(sorted(clash)[0])} is both released (--columns, --sensitive or "
            "--keep) and dropped; --drop is deprecated: a column nobody declared is never released"
        )
    if ROW in declared:
        raise DbanonError(f"column {quote_ident(ROW)} of {r.source} has the name of the release's "
            "row id")
    return [c for c in cols if c in declared and c != r.key.name]


class PerturbingMethod(Method):
    """A method that adds noise to numeric columns, one batch of rows at a time."""

    promises: ClassVar[tuple[str, ...]] = ()  # no equivalence-class model: its own checks
    randomised = True
    generalises = False
    shape = "perturbed"
    keyed: ClassVar[str] = "row"  # prf_uniform's keying of a fresh draw (ina: per tuple)
    legacy_keyed: ClassVar[str] = "value"  # of a kept state drawn before the keying was kept
    releases = (
        "`NAME`: a random row id, the `--columns` with noise, then `--sensitive` and `--keep` "
        "as they are; no other column, not even one added to the source later"
    )

    # --- what a method supplies -----------------------------------------------------------------

    @abstractmethod
    def draw(
        self, conn: psycopg.Connection, r: Resolved, alpha: np.ndarray, seed: int
    ) -> dict[str, Any]:
        """The method's own state of a fresh draw (ina: reference points from a sample)."""

    @abstractmethod
    def noise(
        self, r: Resolved, state: NoiseState, x: np.ndarray, u: np.ndarray
    ) -> tuple[np.ndarray, dict[str, int]]:
        """Perturbed values of a batch (u: uniform in [-1, 1) per value) and counters to sum
        over the stream (checked by `stream_checks`)."""

    def floor(self, r: Resolved, ranges: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        """The floor of a fresh draw, a share of each column's scale: `--noise-floor`, or by
        default n^(-1/m) of the column's range (whatever `--normalise` says)."""
        share = r.options.get("noise_floor")
        if share is not None:
            return np.full(len(alpha), float(share))
        return r.rows ** (-1.0 / len(alpha)) * ranges / alpha

    def stream_checks(self, r: Resolved, counters: dict[str, int]) -> list[Check]:
        """Checks of what the stream counted (ina: every tuple kept its region)."""
        return []

    def recount(
        self, conn: psycopg.Connection, r: Resolved, state: NoiseState | None, released: Any
    ) -> dict[str, int]:
        """The stream's counters, counted again on a published release (`stream_checks` then
        checks them): `released` is (source values, released values) of the paired rows."""
        return {}

    # --- the lifecycle's calls ------------------------------------------------------------------

    def validate(self, conn: psycopg.Connection, r: Resolved) -> None:
        for c in r.qi:
            if c.kind != catalog.NUMERIC:
                raise DbanonError(
                    f"column {quote_ident(c.name)} of {r.source} is {c.type}, not numeric: "
                    f"--algorithm {self.name} perturbs numeric columns only"
                )
        if r.rows < 2:
            raise DbanonError(f"{r.source} has {r.rows} rows: nothing to perturb")
        for c, (low, high, std) in zip(r.qi, self._stats_of(conn, r), strict=True):
            if low == high or std == 0:
                raise DbanonError(
                    f"column {quote_ident(c.name)} of {r.source} is constant ({low}): noise "
                    "relative to its spread would be none; leave it out of --columns"
                )
        released_columns(conn, r)

    def shaping(self, conn: psycopg.Connection, r: Resolved) -> Shaping:
        """The run's clamping bounds (the source's range now, with `--clamp`; an integer
        type's own bounds with `--integral`, so the cast cannot fail) and rounded columns."""
        m = len(r.qi)
        low, high = np.full(m, -np.inf), np.full(m, np.inf)
        if r.options.get("clamp"):
            for i, (lo, hi, _) in enumerate(self._stats_of(conn, r)):
                low[i], high[i] = lo, hi
        integral = np.array([bool(r.options.get("integral")) and c.type in INTEGER_TYPES
                             for c in r.qi], dtype=bool)  # fmt: skip
        for i, c in enumerate(r.qi):
            if integral[i]:
                _, lo, hi = INTEGER_TYPES[c.type]
                low[i], high[i] = max(low[i], lo), min(high[i], hi)
        return Shaping(low, high, integral)

    def build(self, conn: psycopg.Connection, r: Resolved, ctx: BuildContext) -> dict[str, Any]:
        seed = int(r.seed or 0)
        state = self._state(conn, r, seed)
        ctx.lap("reference")
        shape = self.shaping(conn, r)
        # the linkage sample: rows in a secret order (a hash keyed by the run's noise secret)
        order = int.from_bytes(hashlib.blake2b(b"linkage", key=state.secret, digest_size=8)
                               .digest(), "little", signed=True)  # fmt: skip
        rows, columns, ranks = self._extract(conn, r, order)
        n = len(rows.keys)
        ctx.say(f"perturbing {n:,} rows of {r.source}")
        from dbanon.algorithms.prf import prf_uniform_blob  # numba: loaded by publishes only

        sampled = _first(ranks, SAMPLE)  # each linkage row's place in the stream
        del ranks
        measure = self._linkage(r, state, shape, rows.keys, columns, sampled)

        types = self._types(r, shape)
        out = [np.empty(n, dtype=_BINARY[t]) for t in types]  # as the release's COPY takes them
        clamped = np.zeros(len(r.qi), dtype=np.int64)
        security = Security([c.name for c in r.qi])
        counters: dict[str, int] = {}
        lens, keying = rows.keys.lens, self.keying(state)
        at = np.concatenate([[0], np.cumsum(np.maximum(lens, 0))])  # batch keys: blob[at[lo]:]

        def perturbed(lo: int, columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray,
                                                                    dict[str, int]]:  # fmt: skip
            """A batch's values, their keyed noise and the method's perturbed values (pure:
            compiled or NumPy, mostly without the GIL)."""
            hi = min(lo + BATCH, n)
            x = np.column_stack([c[lo:hi] for c in columns])
            u = prf_uniform_blob(state.secret, rows.keys.blob[at[lo] : at[hi]], lens[lo:hi], x,
                                 keying)  # fmt: skip
            return x, *self.noise(r, state, x, u)

        # In batches, as the rows were once read: the figures' sums merge as they always did.
        # Batches are perturbed AHEAD at a time in threads, and the linkage's k-d trees (scipy,
        # without the GIL) built in one more, while this thread sums each batch in its order.
        starts = range(0, n, BATCH)
        batches = ahead(partial(perturbed, columns=columns), starts, AHEAD, "dbanon-perturb")
        with ThreadPoolExecutor(1, "dbanon-linkage") as linked:
            measured = []
            for lo, (x, batch, count) in zip(starts, batches, strict=True):
                hi = min(lo + BATCH, n)
                batch, n_clamped = shape.apply(batch)
                clamped += n_clamped
                own = np.where((sampled >= lo) & (sampled < hi), sampled - lo, -1)
                measured.append(linked.submit(measure.add_rows, own, x))
                for name, v in count.items():
                    counters[name] = counters.get(name, 0) + int(v)
                security.add(x, batch)
                for j, t in enumerate(types):
                    if t != "float8" and np.isnan(batch[:, j]).any():
                        raise DbanonError(f"column {quote_ident(r.qi[j].name)} of {r.source} "
                                          f"holds NaN: --integral cannot release it as {t}")
                    out[j][lo:hi] = batch[:, j]
            for done in measured:
                done.result()
        del columns  # the release is written from the keys, `out` and the shown columns
        ctx.unique_shares = _counted_shares(conn, r, rows)
        ctx.lap("stream")
        ctx.say("writing the release")
        self._materialise(conn, r, ctx, rows, dict(zip([c.name for c in r.qi], zip(
            types, out, strict=True), strict=True)))  # fmt: skip
        ctx.lap("materialise")
        self._counters[r.spec.name] = counters  # one run of a release at a time (runs.py)
        self._stats.pop(r.spec.name, None)
        self._states[r.spec.name] = state
        floor = {c.name: float(f) for c, f in zip(r.qi, state.floor, strict=True)}
        shaped = {"clamped": {c.name: int(n) for c, n in zip(r.qi, clamped, strict=True)}
                  } if r.options.get("clamp") else {}  # fmt: skip
        return {**security.figures(), **measure.figures(), "noise_floor": floor, **counters,
                **shaped, "batch_rows": BATCH}  # fmt: skip

    def __init__(self) -> None:
        # per release: what the stream counted, and the state to keep once recorded
        self._counters: dict[str, dict[str, int]] = {}
        # per release: the run's column statistics (validate, the state and the clamp read the
        # same snapshot's: one scan, not three), with the run they were counted for
        self._stats: dict[str, tuple[Resolved, list[tuple[float, float, float]]]] = {}
        self._states: dict[str, NoiseState] = {}
        # the row map the checks pair released rows through: the run's own (kept once
        # recorded) or, rechecking a published release, its kept one
        self._maps: dict[str, sql.Identifier] = {}

    def _stats_of(self, conn: psycopg.Connection, r: Resolved) -> list[tuple[float, float, float]]:
        """`stats` of this run, counted once."""
        held = self._stats.get(r.spec.name)
        if held is None or held[0] is not r:
            held = self._stats[r.spec.name] = (r, stats(conn, r))
        return held[1]

    def checks(self, r: Resolved, built: list[Built]) -> list[Check]:
        """Independent SQL checks of the built table (shape; every row paired with one source
        row whose other columns it carries unchanged), then the stream's own."""
        rel = r.stored(built[0])

        def shape(conn: psycopg.Connection) -> CheckResult:
            expected = [ROW, *released_columns(conn, r)]
            found = [n for (n,) in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                "AND NOT attisdropped ORDER BY attnum", [rel.as_string(conn)],
            ).fetchall()]  # fmt: skip
            holds = found == expected and r.key.name not in found
            return CheckResult("release columns (no key)", holds, {}, None if holds else
                               f"columns {idents(found)}, expected {idents(expected)}")  # fmt: skip

        def paired(conn: psycopg.Connection) -> CheckResult:
            """Each released row's key (through the map) and other columns, as a record's text,
            hashed and summed, against the same sum over the source: equal multisets of (key,
            other columns), so every row is paired with one source row whose other columns it
            carries unchanged. A join of the release, the map and the source row by row took
            twice as long (1.3 s at 1M rows); it runs only to name what differs."""
            perturbed = {q.name for q in r.qi}
            others = [sql.Identifier(c) for c in released_columns(conn, r) if c not in perturbed]

            def digest(key: sql.Composable, ref: str) -> sql.Composable:
                cols = [key, *(sql.SQL("{}.{}::text").format(sql.Identifier(ref), c)
                               for c in others)]  # fmt: skip
                return sql.SQL("sum(hashtextextended(ROW({})::text, 17)::numeric)").format(
                    sql.SQL(", ").join(cols))

            nulls = sql.SQL(" OR ").join(sql.SQL("b.{} IS NULL").format(c.ident) for c in r.qi)
            # the source's sum on a second backend over this snapshot, beside the release's
            summed = sql.SQL("SELECT {} FROM {} s").format(
                digest(sql.SQL("s.{}::text").format(r.key.ident), "s"), r.source.ident)
            aside = Aside(conn, lambda c: c.execute(summed).fetchone()[0])
            try:
                rows, matched, released, null = conn.execute(sql.SQL(
                    """SELECT count(*), count(st.key), {digest}, count(*) FILTER (WHERE {nulls})
                       FROM {rel} b LEFT JOIN {pairs} st ON st.row_id = b.{row}"""
                ).format(digest=digest(sql.SQL("st.key"), "b"), nulls=nulls, rel=rel,
                         pairs=pairs, row=sql.Identifier(ROW))).fetchone()  # fmt: skip
                source = aside.result()
            finally:
                aside.close()
            holds = rows == matched == r.rows and null == 0 and released == source
            figures = {"released_rows": rows, "paired_rows": matched}
            if holds:
                return CheckResult("rows paired, other columns unchanged", True, figures, None)
            differ = sql.SQL(" OR ").join(
                [sql.SQL("b.{c}::text IS DISTINCT FROM s.{c}::text").format(c=c) for c in others]
                or [sql.SQL("false")])  # fmt: skip
            rows, matched, changed, null = conn.execute(
                sql.SQL(
                    """SELECT count(*), count(s.{key}), count(*) FILTER (WHERE {differ}),
                              count(*) FILTER (WHERE {nulls})
                       FROM {rel} b LEFT JOIN {pairs} st ON st.row_id = b.{row}
                       LEFT JOIN {src} s ON s.{key}::text = st.key"""
                ).format(
                    key=r.key.ident,
                    differ=differ,
                    nulls=nulls,
                    rel=rel,
                    pairs=pairs,
                    row=sql.Identifier(ROW),
                    src=r.source.ident,
                )  # fmt: skip
            ).fetchone()
            figures = {"released_rows": rows, "paired_rows": matched}
            worst = (
                f"{rows} rows for {r.rows} source rows, {matched} paired, {changed} with other "
                f"columns changed, {null} with a NULL perturbed value"
            )
            if rows == matched == r.rows and changed == 0 and null == 0:
                worst = "released rows and source rows differ as multisets (a key paired twice)"
            return CheckResult("rows paired, other columns unchanged", False, figures, worst)

        counters = self._counters.pop(r.spec.name, {})
        pairs = self._maps[r.spec.name]
        return [
            Check("release columns", shape),
            Check("release rows", paired),
            *self.stream_checks(r, counters),
        ]

    def rechecking(self, conn: psycopg.Connection, r: Resolved, built: list[Built]) -> None:
        """The release's kept row map (row id -> key) to pair its rows, and the stream's
        counters counted again from the source and the released values."""
        assert r.release_id is not None  # a published release
        pairs = map_table(r.release_id)
        if conn.execute("SELECT to_regclass(%s) IS NULL", [pairs.as_string(conn)]).fetchone()[0]:
            pairs = sql.Identifier("dbanon_noise_pairs")  # no map: no row pairs
            conn.execute(sql.SQL("CREATE TEMP TABLE {} {} ON COMMIT DROP").format(
                pairs, MAP_COLUMNS))  # fmt: skip
        self._maps[r.spec.name] = pairs
        row = conn.execute(
            "SELECT secret, state FROM dbanon.noise_state WHERE release_id = %s", [r.release_id]
        ).fetchone()
        state = (
            None if row is None else
            NoiseState(bytes(row[0]), np.array(row[1]["alpha"]), row[1]["extra"],
                       row[1].get("signature", ""))
        )  # fmt: skip
        found = conn.execute(
            sql.SQL(
                "SELECT {src}, {out} FROM {rel} b JOIN {pairs} st ON st.row_id = b.{row} "
                "JOIN {source} s ON s.{key}::text = st.key"
            ).format(
                src=sql.SQL(", ").join(sql.SQL("s.{}::float8").format(c.ident) for c in r.qi),
                out=sql.SQL(", ").join(sql.SQL("b.{}::float8").format(c.ident) for c in r.qi),
                rel=r.stored(built[0]), pairs=pairs, row=sql.Identifier(ROW),
                source=r.source.ident, key=r.key.ident,
            )  # fmt: skip
        ).fetchall()
        m = len(r.qi)
        values = np.array(found, dtype=np.float64).reshape(len(found), 2 * m)
        self._counters[r.spec.name] = self.recount(conn, r, state, (values[:, :m], values[:, m:]))

    def figures(
        self, conn: psycopg.Connection, r: Resolved, built: list[Built], checked: dict[str, Any]
    ) -> dict[str, Any]:
        """A perturbed release has no classes: its rows are each their own."""
        return {"rows": int(checked["released_rows"]), "classes": None, "min_class_size": None}

    def recorded(self, conn: psycopg.Connection, r: Resolved, release_id: int) -> None:
        """Keep the secret, the normalisation, the method's state and the row map (private)."""
        state = self._states.pop(r.spec.name, None)
        if state is None:
            return
        conn.execute(
            """INSERT INTO dbanon.noise_state (release_id, secret, state)
               VALUES (%s, %s, %s::jsonb)
               ON CONFLICT (release_id) DO UPDATE SET secret = EXCLUDED.secret,
                   state = EXCLUDED.state""",
            [release_id, state.secret, state.as_json()],
        )
        fresh = self._maps.pop(r.spec.name)
        kept = map_table(release_id)
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(kept))
        conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
            fresh, sql.Identifier(map_name(release_id))))  # fmt: skip
        conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(kept, sql.Literal(MAP_COMMENT)))

    # --- helpers --------------------------------------------------------------------------------

    def keying(self, state: NoiseState) -> str:
        """How the state's noise is keyed: as recorded when it was drawn; a state kept from
        before the keying was recorded keeps the keying it was drawn with (`legacy_keyed`), so
        a refresh does not silently give every row of an old release a second draw."""
        return str(state.extra.get("keyed", self.legacy_keyed))

    def signature(self, r: Resolved) -> str:
        """The spec a state was drawn for: source, key, columns, options but the seed."""
        opts = {k: v for k, v in r.options.items()
                if k not in ("seed", "refresh_policy", *SHAPING)}  # fmt: skip
        return json.dumps([r.spec.source, r.key.name, [c.name for c in r.qi], opts],
                          sort_keys=True)  # fmt: skip

    def _state(self, conn: psycopg.Connection, r: Resolved, seed: int) -> NoiseState:
        """The kept state when the policy and the spec allow it, else a fresh draw."""
        sig = self.signature(r)
        if (r.options.get("refresh_policy") == "persist" and not r.regroup
                and not r.new_source and r.release_id is not None):  # fmt: skip
            row = conn.execute(
                "SELECT secret, state FROM dbanon.noise_state WHERE release_id = %s",
                [r.release_id],
            ).fetchone()
            if row is not None and row[1].get("signature") == sig:
                return NoiseState(bytes(row[0]), np.array(row[1]["alpha"]), row[1]["extra"], sig)
        low_high_std = self._stats_of(conn, r)
        ranges = np.array([h - lo for lo, h, _ in low_high_std])
        if r.options["normalise"] == "range":
            alpha = np.array([h - lo for lo, h, _ in low_high_std])
        else:
            alpha = np.array([s for _, _, s in low_high_std])
        if r.options.get("seed") is not None:  # reproducible on request (tests, experiments)
            secret = hashlib.sha256(f"dbanon-noise:{seed}".encode()).digest()
        else:
            secret = secrets.token_bytes(32)
        extra = self.draw(conn, r, alpha, seed)
        extra["floor"] = self.floor(r, ranges, alpha).tolist()
        extra["keyed"] = self.keyed
        return NoiseState(secret, alpha, extra, sig)

    def _linkage(
        self, r: Resolved, state: NoiseState, shape: Shaping, keys: Keys,
        columns: list[np.ndarray], sampled: np.ndarray,
    ) -> Linkage:  # fmt: skip
        """The sampled rows perturbed as the stream will perturb them (as one batch of their
        own, in the secret order), to be measured against every original as the stream reads
        it."""
        from dbanon.algorithms.prf import prf_uniform_blob
        from dbanon.db import copykernels

        lens = np.ascontiguousarray(keys.lens[sampled], dtype=np.int32)
        starts = np.concatenate([[0], np.cumsum(np.maximum(keys.lens, 0), dtype=np.int64)])
        blob = copykernels.concat(keys.blob, starts[sampled], lens)
        del starts
        picked = Keys(blob, lens)
        x = np.column_stack([c[sampled] for c in columns]).reshape(len(sampled), len(columns))
        u = prf_uniform_blob(state.secret, picked.blob, picked.lens, x, self.keying(state))
        released, _ = shape.apply(self.noise(r, state, x, u)[0])
        return Linkage(list(picked), released, state.alpha)

    def _extract(
        self, conn: psycopg.Connection, r: Resolved, order: int
    ) -> tuple[Streamed, list[np.ndarray], np.ndarray]:
        """One binary COPY of the source: each row's key as text, its perturbed columns as
        float8 (returned apart, one array each), its other released columns in their own
        binary form (as text, a type without one), in the order the release has them; and
        each row's rank key for the linkage sample, hashtextextended(key::text, order)."""
        names = released_columns(conn, r)
        perturbed = {c.name for c in r.qi}
        by_name = {c.name: c for c in [*r.sensitive, *r.keep]}
        shown = [by_name[n] for n in names if n not in perturbed]
        textual = as_text(conn, shown)
        key, kind = key_field(r.key)
        exprs = [key]
        exprs += [sql.SQL("{}::float8").format(c.ident) for c in r.qi]
        exprs += [sql.SQL("{}::text" if c.name in textual else "{}").format(c.ident)
                  for c in shown]  # fmt: skip
        exprs.append(sql.SQL("hashtextextended({}::text, {})").format(r.key.ident,
                                                                     sql.Literal(order)))
        m = len(r.qi)
        keys, *cols, ranks = copy_parts(
            conn, lambda cond: sql.SQL("SELECT {} FROM {} s{}").format(
                sql.SQL(", ").join(exprs), r.source.ident, where(cond)),
            r.source, "s", [kind, *["float8"] * m, *["key"] * len(shown), "key"], r.rows,
            lambda n: r.say(f"streaming rows out with COPY: {n:,} of {r.rows:,}"),
        )  # fmt: skip
        assert isinstance(keys, Keys) and isinstance(ranks, Keys)
        raw = {c.name: col for c, col in zip(shown, cols[m:], strict=True)}
        rank = ranks.blob.view(">i8").astype(np.int64)  # an int8's binary form, each row
        return Streamed(keys, names, raw, textual), cols[:m], rank  # type: ignore[return-value]

    def _types(self, r: Resolved, shape: Shaping) -> list[str]:
        """The type each perturbed column is released as: float8, or with `--integral` an
        integer column's own (the cast from the registry)."""
        return [INTEGER_TYPES[c.type][0] if whole else "float8"
                for c, whole in zip(r.qi, shape.integral, strict=True)]  # fmt: skip

    def _materialise(
        self, conn: psycopg.Connection, r: Resolved, ctx: BuildContext, rows: Streamed,
        out: dict[str, tuple[str, np.ndarray]],
    ) -> None:  # fmt: skip
        """The run's row ids (secret, random, distinct), its row map (row id -> key: what the
        checks pair rows through, kept once the run is recorded), and the release: created
        empty with its columns' types, then written from the arrays by one binary COPY, rows
        in the order of their ids."""
        built = ctx.made(r.objects[0])
        n = len(rows.keys)
        ids = _row_ids(n)
        order = np.argsort(ids)
        ids = ids.astype(">i8")  # as COPY takes an int8, for the map and the release
        # a name of the run's own: renamed to the release's map (map_table) when recorded
        fresh = sql.Identifier("dbanon", f"noise_map_next_{secrets.token_hex(8)}")
        conn.execute(sql.SQL("CREATE TABLE {} {}").format(fresh, MAP_COLUMNS))
        copy_rows(conn, sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(fresh),
                  [Field.fixed(ids, ">i8"), Field.entries(Dictionary.of_keys(rows.keys))],
                  np.arange(n))  # fmt: skip
        analyze_stage(conn, fresh)  # without statistics the checks' join sorts the source
        self._maps[r.spec.name] = fresh
        made = [sql.SQL("NULL::int8 AS {}").format(sql.Identifier(ROW))]
        fields = [Field.fixed(ids, ">i8")]
        for name in rows.names:
            ident = sql.Identifier(name)
            if name in out:
                kind, values = out[name]
                made.append(sql.SQL("NULL::{} AS {}").format(sql.SQL(kind), ident))
                fields.append(Field.fixed(values, _BINARY[kind]))
            else:
                text = name in rows.textual
                made.append(sql.SQL("s.{}::text AS {}" if text else "s.{} AS {}").format(
                    ident, ident))  # fmt: skip
                fields.append(Field.entries(Dictionary.of_keys(rows.shown[name])))
        target = r.stored(built)
        conn.execute(sql.SQL("CREATE TABLE {} AS SELECT {} FROM {} s WITH NO DATA").format(
            target, sql.SQL(", ").join(made), r.source.ident))  # fmt: skip
        copy_rows(conn, sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(target), fields,
                  order)  # fmt: skip
        retype(conn, r, target, False, rows.textual)


def map_name(release_id: int) -> str:
    """A release's row map (row id -> key), a table of its own in schema dbanon (revision
    0016): written once per run by COPY and swapped in by a rename, not deleted and inserted
    row by row into a table every release shares."""
    return f"noise_map_{release_id}"


def map_table(release_id: int) -> sql.Identifier:
    return sql.Identifier("dbanon", map_name(release_id))


def forget(conn: psycopg.Connection, release_id: int) -> None:
    """Drop a release's row map (the release is dropped)."""
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(map_table(release_id)))


MAP_COLUMNS = sql.SQL("(row_id bigint NOT NULL, key text NOT NULL)")
MAP_COMMENT = (
    "Private: the source key of each row of a perturbation release (its dbanon_row), for "
    "`dbanon compare` and `dbanon check --release`. Never granted: it links released rows "
    "back to source keys."
)
# The binary COPY form of each type a perturbed column is released as.
_BINARY = {"float8": ">f8", "int2": ">i2", "int4": ">i4", "int8": ">i8"}


@dataclass(frozen=True)
class Streamed:
    """A run's rows as one COPY streamed them (PerturbingMethod._extract)."""

    keys: Keys  # each row's key as text (its UTF-8 bytes)
    names: list[str]  # the released columns, in the release's order (but its row id)
    shown: dict[str, Keys]  # each other released column's values, in their binary form
    textual: set[str]  # those of them streamed as text (a type without a binary form)


def _counted_shares(conn: psycopg.Connection, r: Resolved, rows: Streamed) -> dict[str, float]:
    """Each sensitive column's unique share (identifying.gate) from the values streamed: every
    row is released with them as they are, so where equal values are equal bytes
    (dbanon.db.rows.equal_as_bytes) their bytes tell the release's classes of them."""
    from dbanon.core.groupsort import unique_share  # numba: loaded by publishes only
    from dbanon.db.copykernels import dedupe

    out = {}
    for c in r.sensitive:
        keys = rows.shown.get(c.name)
        if keys is None or c.name in rows.textual or not equal_as_bytes(conn, r.source, [c]):
            continue
        d = Dictionary.of_keys(keys)
        codes, first = dedupe(d.data, d.starts, d.lens)
        out[c.name] = unique_share(np.where(codes < 0, len(first), codes))  # NULL: one value
    return out


def _first(ranks: np.ndarray, k: int) -> np.ndarray:
    """The rows of the k least ranks, in their order (as ORDER BY rank LIMIT k gives them)."""
    rows = np.argpartition(ranks, k - 1)[:k] if k < len(ranks) else np.arange(len(ranks))
    return rows[np.argsort(ranks[rows], kind="stable")]


def _row_ids(n: int) -> np.ndarray:
    """n distinct random 63-bit row ids, drawn anew every run (never reproducible: they link
    no row across releases, and say nothing of the key or the source's order)."""
    rng = np.random.default_rng(secrets.randbits(64))
    while True:
        ids = rng.integers(1, 2**63 - 1, size=n, dtype=np.int64)
        order = np.sort(ids)
        if not (order[1:] == order[:-1]).any():  # a repeat: once in 10^7 runs of 1M rows
            return ids

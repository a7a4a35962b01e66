"""cbg refreshed by whole units (`--refresh-policy sealed`): a diff of two releases' QIT and ST
pins nobody who joined or left.

A cbg unit (dbanon.algorithms.cbg_persist) is a set of rows cut into groups and k buckets so
that every group has a row in every bucket: the values a class shows are its unit's, and a
consumer can find the units of a release (groups and buckets that share rows). When a refresh
lets one row join or leave a unit, the unit's ST counts move by exactly that person's value.
Under `sealed` (dbanon.algorithms.sealed) a unit is released again, with its rows, groups and
values as they were, while every row it released is here and unchanged (its rows are dealt
into its k buckets again, each group keeping a row in every bucket, and the buckets numbered
afresh: its classes show the same values, as under `persist`); a unit that lost or changed
a row is retired whole and its other rows wait as a block; the new, changed and waiting rows
are cut into new units by
cross-bucket generalisation, each released only when it keeps (k, l) by (3.22) on its own,
the intersection guard, and the diff check against the units it shares people with. Rows that
form no such unit wait (`withheld_rows`).
"""

from __future__ import annotations

import hashlib
import secrets
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg

from dbanon.algorithms.cbg import block_size, cross_bucket
from dbanon.algorithms.cbg_persist import Layout, deal, layout, unit_holds
from dbanon.algorithms.sealed import seal_groups
from dbanon.db.stream import Keys
from dbanon.methods.grouped import _shown, history
from dbanon.setlogic import composition

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved

# The run record's key for the release's secret that deals a unit (kept from run to run, in
# the catalog only: a consumer never sees it)
SECRET = "unit_secret"


def seal(
    conn: psycopg.Connection, r: Resolved, keys: Keys, x: np.ndarray, sa: np.ndarray,
    values: list, k: int, ell: int,
) -> tuple[Layout, np.ndarray, dict[str, Any]]:  # fmt: skip
    """The layout of the released units, each withheld row's block (-1: none) and figures.
    `sa`: the rows' sensitive codes into `values`."""
    prev, same, sizes = composition.sealing(conn, r.release_id, keys, r.source, r.key,
                                            r.released_columns)  # fmt: skip
    n = len(sa)
    hist = history(conn, r, keys)
    plausible, sets = _plausible(conn, r, keys, values)
    needed = composition.values_needed(r.models)
    need = np.array([min(needed, len(v)) for v in sets], dtype=np.int64)
    secret = _secret(conn, r)
    texts = list(keys)
    rng = np.random.default_rng(secrets.randbits(128))  # new units and ids: a secret draw

    def dealt(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A unit's groups and buckets, drawn from the release's secret and its members: a
        unit kept whole is dealt as it was, so what its classes showed of each row stays."""
        members = "\x1f".join(sorted(texts[i] for i in rows.tolist())).encode()
        digest = int.from_bytes(hashlib.blake2b(members, digest_size=8).digest(), "big")
        return deal(x, rows, k, np.random.default_rng([secret, digest]))

    def cluster(rows: np.ndarray) -> np.ndarray:
        """Cross-bucket's T_gens of the rows (each a unit); a row it leaves out alone."""
        size = block_size(len(rows), r.options.get("block_size"), bool(r.options.get("exact")),
                          k, ell)
        ids = cross_bucket(x[rows], sa[rows], k, ell, rng, size).tgen.copy()
        loose = ids < 0
        ids[loose] = int(ids.max(initial=-1)) + 1 + np.arange(int(loose.sum()))
        return ids

    def holds(rows: np.ndarray) -> bool:
        """(k, l) by (3.22), and every row earlier releases showed keeps k plausible rows in
        its class (its group) and its plausible values, as the lifecycle's measure counts."""
        rows = np.sort(rows)
        if len(rows) < k:
            return False
        return unit_holds(sa, rows, dealt(rows), plausible, sets, need, k, ell)

    unit, block, figures = seal_groups(
        prev, same, sizes, cluster, holds, k, needed,
        hist.tag if hist else np.zeros(n, dtype=np.int64), _shown(conn, r, hist), hist,
    )  # fmt: skip
    members = {}
    order = np.argsort(unit, kind="stable")
    bounds = np.searchsorted(unit[order], np.arange(int(unit.max(initial=-1)) + 2))
    for u in range(int(unit.max(initial=-1)) + 1):
        rows = np.sort(order[bounds[u] : bounds[u + 1]])
        if len(rows):
            members[u] = rows
    if not members:
        raise ValueError("every row is withheld (no unit of the rows that changed keeps (k, l))")
    laid = layout(members, {u: dealt(rows) for u, rows in members.items()},
                  rng.permutation(np.array(sorted(members))), n, k, 0)  # fmt: skip
    figures["tgens"] = laid.units
    figures[SECRET] = secret
    return laid, block, figures


def _plausible(
    conn: psycopg.Connection, r: Resolved, keys: Keys, values: list
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per row the index of its plausible values in the map (-1: none), and those sets as
    codes into `values` (values the table no longer holds left out)."""
    state = composition.previous_state(conn, r.release_id, keys)
    if state is None:
        return np.full(len(keys), -1, dtype=np.int64), []
    _, plausible, tagged = state
    code = {("n" if v is None else "v:" + str(v)): c for c, v in enumerate(values)}
    sets = [np.array(sorted({code[t] for t in s if t in code}), dtype=np.int64)
            for s in tagged]  # fmt: skip
    return plausible, sets


def _secret(conn: psycopg.Connection, r: Resolved) -> int:
    """The release's secret for dealing units: its latest run's, or a new one."""
    if r.release_id is not None:
        row = conn.execute(
            """SELECT (metrics ->> %s)::bigint FROM dbanon.run
               WHERE release_id = %s AND status = 'succeeded'
               ORDER BY finished_at DESC, id DESC LIMIT 1""",
            [SECRET, r.release_id],
        ).fetchone()
        if row and row[0] is not None:
            return int(row[0])
    return secrets.randbits(62)

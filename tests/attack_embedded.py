"""An attacker on a local-anatomy release who filters each bucket by what the target's known QIs
rule out: plain SELECTs, pure Python, nothing from dbanon (as tests/verify_local.py).

The attacker knows a target's QI values and unflagged semi-sensitive values (thesis ch. 4,
attacker (a)). Its candidates are the released rows showing exactly those values (NULL where the
target's cell is flagged). A bucketised value whose parts ('/'-separated) name a value of a
published QI other than the target's cannot be the target's, so it is dropped from each
candidate's bucket; the target's exposure is the mean share of its true value among what is
left, over the candidates whose bucket keeps anything. A stand-in that embeds no published QI
leaves every bucket whole, and local anatomy's bound 1/l holds; one that embeds education does
not.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import psycopg
from psycopg import sql


@dataclass
class Attack:
    targets: int
    mean: float
    above: list[tuple[int, float]]  # (source key, exposure) of each target above 1/l
    disclosed: int  # targets at exposure 1


def _select(conn: psycopg.Connection, rel: tuple[str, str], cols: list[str]) -> list[tuple]:
    return conn.execute(sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(map(sql.Identifier, cols)), sql.Identifier(*rel))).fetchall()


def attack(
    conn: psycopg.Connection, source: tuple[str, str], key: str, flags: tuple[str, str],
    release: tuple[str, str], attr: str, qi: list[str], semi: list[str], ell: int,
) -> Attack:  # fmt: skip
    """Exposure of every person whose `attr` is flagged, against the release NAME and its
    NAME_<attr>_idt / _st; `qi` the published QIs, `semi` the semi-sensitive columns."""
    cols = [*qi, *semi]
    people = {r[0]: dict(zip(cols, r[1:], strict=True))
              for r in _select(conn, source, [key, *cols])}  # fmt: skip
    flagged: set[tuple[int, str]] = set(_select(conn, flags, [key, "column_name"]))
    schema, name = release
    shown = _select(conn, release, ["row_id", *cols])
    bucket_of = dict(_select(conn, (schema, f"{name}_{attr}_idt"), ["row_id", "bucket_id"]))
    values: dict[int, Counter] = {}
    for b, v in _select(conn, (schema, f"{name}_{attr}_st"), ["bucket_id", attr]):
        values.setdefault(b, Counter())[v] += 1
    domain = {c: {str(r[1 + i]) for r in shown} for i, c in enumerate(qi)}

    def fits(value: str, person: dict) -> bool:
        return all(part == str(person[c])
                   for part in str(value).split("/") for c in qi if part in domain[c])  # fmt: skip

    index: dict[tuple, list[int]] = {}
    for r in shown:
        index.setdefault(tuple(r[1:]), []).append(r[0])
    exposures: list[tuple[int, float]] = []
    for pid, person in people.items():
        if (pid, attr) not in flagged:
            continue
        seen = tuple(None if c == attr or (pid, c) in flagged else person[c] for c in cols)
        shares = []
        for row in index.get(seen, []):
            kept = {v: n for v, n in values[bucket_of[row]].items() if fits(v, person)}
            if kept:
                shares.append(kept.get(person[attr], 0) / sum(kept.values()))
        exposures.append((pid, sum(shares) / len(shares) if shares else 0.0))
    above = [(p, e) for p, e in exposures if e > 1 / ell + 1e-9]
    mean = sum(e for _, e in exposures) / len(exposures) if exposures else 0.0
    return Attack(len(exposures), mean, above, sum(e >= 1 - 1e-9 for _, e in exposures))

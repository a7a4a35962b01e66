"""A map's fingerprints read client-side (copykernels.hex_fingerprints) as the server reads
them: ('x' || 16 hex digits)::bit(64)::int8, after a RECORD kind's 'r' or from an MD5's start."""

from __future__ import annotations

import numpy as np
import psycopg

from dbanon.db.copykernels import hex_fingerprints
from dbanon.db.stream import Keys

SERVER = ("SELECT ('x' || CASE WHEN left(%s, 1) = 'r' THEN substr(%s, 2, 16) "
          "ELSE left(%s, 16) END)::bit(64)::int8")  # fmt: skip


def test_fingerprints_read_as_the_server_reads_them(conn: psycopg.Connection) -> None:
    rng = np.random.default_rng(5)
    texts = ["r" + "0123456789abcdef", "fedcba9876543210" + "f" * 16, "r" + "f" * 16,
             "ABCDEF0123456789", "abc", "r8000000000000000", "r0000000000000000"]  # fmt: skip
    texts += [("r" if rng.random() < 0.5 else "") + "".join(rng.choice(list("0123456789abcdef"),
              int(rng.choice([16, 32])))) for _ in range(200)]  # fmt: skip
    keys = Keys.of([*texts, ""])
    lens = keys.lens.copy()
    lens[-1] = -1  # NULL: no fingerprint
    fp, has, record = hex_fingerprints(keys.blob, lens)
    want = [conn.execute(SERVER, [t, t, t]).fetchone()[0] for t in texts]
    assert fp[:-1].tolist() == want
    assert has.tolist() == [True] * len(texts) + [False]
    assert record[:-1].tolist() == [t.startswith("r") for t in texts] and not record[-1]
    assert len(set(want)) > 150 and min(want) < 0 < max(want)  # both signs, no collapse

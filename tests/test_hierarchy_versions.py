"""Hierarchies a release depends on are frozen (issue 19 item 4).

`hierarchy import --replace` of a hierarchy in use is refused naming the releases; with `--force`
a live full-domain view keeps its output (it reads the version it was verified with), the next
refresh takes the new one and records its version in the run, and the old version is deleted
once nothing pins it. Versions are content hashes, recomputed here with hashlib from the rows.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from alembic import command
from helpers import cli, cli_json, make_table, snapshot

from dbanon.db import catalog

OLD = "N;NS;*\nS;NS;*\nE;EW;*\nW;EW;*\n"
NEW = "N;NE;*\nS;SW;*\nE;NE;*\nW;SW;*\n"


def content_hash(text: str) -> str:
    """The version of a hierarchy file: its rows by leaf, labels joined by U+001F, rows by
    U+001E, SHA-256 (what dbanon documents), computed without dbanon."""
    rows = sorted(line.split(";") for line in text.strip().splitlines())
    return hashlib.sha256("\x1e".join("\x1f".join(r) for r in rows).encode()).hexdigest()


@pytest.fixture
def t(conn: psycopg.Connection, dsn: str, tmp_path) -> psycopg.Connection:  # noqa: ANN001
    rng = random.Random(5)
    rows = [(i, rng.randint(20, 79), rng.choice("NSEW"), rng.choice("FM")) for i in range(1, 301)]
    make_table(conn, "g", "t",
               [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("sex", "text")],
               rows)  # fmt: skip
    (tmp_path / "old.csv").write_text(OLD)
    (tmp_path / "new.csv").write_text(NEW)
    assert cli(dsn, "hierarchy", "import", "region", str(tmp_path / "old.csv")).exit_code == 0
    return conn


def view_rows(conn: psycopg.Connection) -> Counter:
    return Counter(conn.execute("SELECT age, region, sex FROM released.v").fetchall())


def publish_view(dsn: str) -> None:
    code, out = cli_json(dsn, "publish", "v", "--source", "g.t", "--key", "id",
                         "--qi", "age,region,sex", "--k", "40", "--algorithm", "fulldomain",
                         "--as", "view", "--hierarchy", "region=region")  # fmt: skip
    assert code == 0, out


def test_replace_in_use_is_refused_and_forced_leaves_a_live_view_unchanged(
    t: psycopg.Connection, dsn: str, tmp_path  # noqa: ANN001
) -> None:
    publish_view(dsn)
    before = view_rows(t)
    # the view generalises region through the hierarchy (else this test proves nothing)
    assert {r[1] for r in before} == {"NS", "EW"}, before
    pinned = t.execute("SELECT hierarchy_versions FROM dbanon.release WHERE name = 'v'")
    assert pinned.fetchone()[0] == {"region": content_hash(OLD)}

    state = snapshot(t)
    result = cli(dsn, "hierarchy", "import", "region", str(tmp_path / "new.csv"), "--replace")
    assert result.exit_code == 2 and "used by release(s) 'v'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert snapshot(t) == state

    code, out = cli_json(dsn, "hierarchy", "import", "region", str(tmp_path / "new.csv"),
                         "--replace", "--force")  # fmt: skip
    assert code == 0 and out["releases"] == ["v"] and out["version"] == content_hash(NEW), out
    t.execute("UPDATE g.t SET age = age")  # the source is read at every read of the view
    assert view_rows(t) == before  # forced: the live view still reads what it was verified with
    code, shown = cli_json(dsn, "hierarchy", "show", "region")
    assert shown["version"] == content_hash(NEW)
    assert shown["pinned_by"] == {"v": content_hash(OLD)}
    assert sorted(";".join(r) for r in shown["rows"]) == sorted(NEW.strip().splitlines())
    # the pinned version is still readable (metrics of the release as verified), by its hash
    pinned = catalog.load_hierarchy(t, "region", content_hash(OLD))
    assert sorted(";".join(r) for r in pinned.rows()) == sorted(OLD.strip().splitlines())
    t.rollback()

    code, out = cli_json(dsn, "refresh", "v")
    assert code == 0, out
    after = view_rows(t)
    assert {r[1] for r in after} <= {"NE", "SW"} and after, after
    run = t.execute(
        """SELECT u.metrics -> 'hierarchies' FROM dbanon.run u JOIN dbanon.release r
           ON r.id = u.release_id WHERE r.name = 'v' ORDER BY u.id DESC LIMIT 1"""
    ).fetchone()[0]
    assert run == {"region": content_hash(NEW)}
    # nothing pins the old version any more: it is gone
    assert t.execute(
        "SELECT array_agg(version) FROM dbanon.hierarchy WHERE name = 'region'"
    ).fetchone()[0] == [content_hash(NEW)]


def test_refresh_due_takes_a_forced_hierarchy_on_an_unchanged_source(
    t: psycopg.Connection, dsn: str, tmp_path  # noqa: ANN001
) -> None:
    publish_view(dsn)
    assert cli_json(dsn, "schedule", "v", "--every", "1 hour")[0] == 0
    now = datetime.now(timezone.utc)

    def due(at: datetime) -> str:
        code, out = cli_json(dsn, "refresh", "--due", "--now", at.isoformat())
        assert code == 0, out
        return {r["release"]: r["outcome"] for r in out["results"]}["v"]

    assert due(now + timedelta(hours=2)) == "skipped"  # unchanged source, same hierarchy
    assert cli(dsn, "hierarchy", "import", "region", str(tmp_path / "new.csv"), "--replace",
               "--force").exit_code == 0  # fmt: skip
    assert due(now + timedelta(hours=4)) == "refreshed"
    assert {r[1] for r in view_rows(t)} <= {"NE", "SW"}


def test_replacing_with_the_same_content_or_an_unused_one_needs_no_force(
    t: psycopg.Connection, dsn: str, tmp_path  # noqa: ANN001
) -> None:
    publish_view(dsn)
    code, out = cli_json(dsn, "hierarchy", "import", "region", str(tmp_path / "old.csv"),
                         "--replace")  # fmt: skip
    assert code == 0 and out["changed"] is False, out
    assert cli(dsn, "drop", "v", "--yes").exit_code == 0
    code, out = cli_json(dsn, "hierarchy", "import", "region", str(tmp_path / "new.csv"),
                         "--replace")  # fmt: skip
    assert code == 0 and out["changed"] is True, out
    assert t.execute("SELECT count(*) FROM dbanon.hierarchy").fetchone()[0] == 1
    result = cli(dsn, "hierarchy", "import", "region", str(tmp_path / "new.csv"), "--force")
    assert result.exit_code == 2 and "--force only applies with --replace" in result.stderr


def test_migration_computes_the_version_dbanon_computes(dsn: str, tmp_path) -> None:  # noqa: ANN001
    """Down to 0007 and up again: the SQL hash of the migration equals the content hash, for
    labels whose byte order and collation order differ."""
    text = "Zoë;Ä;*\nalpha;Ä;*\nÉmile;b;*\nzeta;b;*\n"
    (tmp_path / "odd.csv").write_text(text)
    assert cli(dsn, "hierarchy", "import", "odd", str(tmp_path / "odd.csv")).exit_code == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        stored = conn.execute("SELECT version FROM dbanon.hierarchy").fetchone()[0]
        assert stored == content_hash(text)
        command.downgrade(catalog.alembic_config(dsn), "0007")
        assert conn.execute(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_schema = 'dbanon' AND table_name = 'hierarchy' AND column_name = 'version'"
        ).fetchone()[0] == 0
        command.upgrade(catalog.alembic_config(dsn), "head")
        assert conn.execute("SELECT version FROM dbanon.hierarchy").fetchone()[0] == stored
        assert conn.execute("SELECT dbanon.lca('odd', ARRAY['Zoë', 'alpha'])").fetchone()[0] == "Ä"


def test_a_replace_during_a_publish_never_leaves_a_view_on_a_deleted_version(
    t: psycopg.Connection, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hierarchy is replaced (committed) while the publish builds: the publish's snapshot
    still sees the old version, which nothing pins yet; the run must not pin a version the
    replace has deleted, so it fails (one line, nothing published), and the next one takes the
    new version."""
    from dbanon.core.hierarchy import Hierarchy
    from dbanon.methods.fulldomain import FullDomain

    real = FullDomain.build

    def build_then_replace(self, conn, r, ctx):  # noqa: ANN001, ANN202
        out = real(self, conn, r, ctx)
        with psycopg.connect(dsn) as other:
            rows = [line.split(";") for line in NEW.strip().splitlines()]
            catalog.store_hierarchy(other, Hierarchy.from_rows("region", rows), replace=True)
            other.commit()
        return out

    state = snapshot(t)
    with monkeypatch.context() as m:
        m.setattr(FullDomain, "build", build_then_replace)
        code, out = cli_json(dsn, "publish", "v", "--source", "g.t", "--key", "id",
                             "--qi", "age,region,sex", "--k", "40", "--algorithm", "fulldomain",
                             "--as", "view", "--hierarchy", "region=region")  # fmt: skip
    assert code == 2 and "'region' was replaced while this run used it" in out["error"], out
    after = snapshot(t)
    assert after["relations"].keys() == state["relations"].keys()
    publish_view(dsn)
    assert {r[1] for r in view_rows(t)} <= {"NE", "SW"}

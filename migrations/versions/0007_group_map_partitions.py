"""The private row-to-group map becomes one partition per release.

A grouping run replaced its release's map by a DELETE of the old rows and an INSERT of the new
ones into one table shared by every release, its (release_id, key) index maintained row by row:
about 15 s per million rows, and slower still as the table bloats with other releases' rows.
As a table LIST-partitioned by release, a run writes its map into a fresh table, builds the
index once by sorting, drops the old partition and attaches the new one (dbanon.composition),
and dropping a release drops its partition instead of deleting its rows one by one. Existing
maps are moved, not lost; the downgrade moves them back.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

COMMENT = """
COMMENT ON TABLE dbanon.group_map IS
    'Private: each source row of a grouping release, its group in the latest release and '
    'the sensitive values every release so far left plausible for it (tagged v:<value>, '
    'n for NULL). Never granted: it links released groups back to source keys.';
"""


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE dbanon.group_map RENAME TO group_map_0006;
        ALTER INDEX dbanon.group_map_pkey RENAME TO group_map_0006_pkey;
        CREATE TABLE dbanon.group_map (
            release_id integer NOT NULL,
            key text NOT NULL,
            gid integer NOT NULL,
            vals text[],
            PRIMARY KEY (release_id, key)
        ) PARTITION BY LIST (release_id);
        DO $$
        DECLARE rid integer;
        BEGIN
            FOR rid IN SELECT DISTINCT release_id FROM dbanon.group_map_0006 LOOP
                EXECUTE format(
                    'CREATE TABLE dbanon.%I PARTITION OF dbanon.group_map FOR VALUES IN (%s)',
                    'group_map_' || rid, rid);
            END LOOP;
        END $$;
        INSERT INTO dbanon.group_map SELECT release_id, key, gid, vals FROM dbanon.group_map_0006;
        DROP TABLE dbanon.group_map_0006;
        """
        + COMMENT
    )


def downgrade() -> None:
    op.execute(
        """
        ALTER TABLE dbanon.group_map RENAME TO group_map_0007;
        ALTER INDEX dbanon.group_map_pkey RENAME TO group_map_0007_pkey;
        CREATE TABLE dbanon.group_map (
            release_id integer NOT NULL REFERENCES dbanon.release ON DELETE CASCADE,
            key text NOT NULL,
            gid integer NOT NULL,
            vals text[],
            PRIMARY KEY (release_id, key)
        );
        INSERT INTO dbanon.group_map SELECT release_id, key, gid, vals FROM dbanon.group_map_0007
            WHERE release_id IN (SELECT id FROM dbanon.release);
        DROP TABLE dbanon.group_map_0007;
        """
        + COMMENT
    )

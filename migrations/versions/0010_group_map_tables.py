"""The private row-to-group map: one standalone table per release, no partitioned parent.

As partitions of one LIST-partitioned dbanon.group_map (revision 0007), every run of every
grouping release locked the shared parent: reading the map took AccessShare on it, and replacing
a release's partition (DROP, then ATTACH) needed AccessExclusive on it. Two refreshes of
different releases each held the first and waited for the second: a deadlock every time. As
tables of their own (dbanon.group_map_<release id>), a run reads and replaces only its release's
table, under its release's lock, and no two runs share a lock on the map. Existing partitions
are detached as they are (rows, primary key and all); the downgrade attaches them back.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

COMMENT = (
    "Private: each source row of a grouping release, its group in the latest release and the "
    "sensitive values every release so far left plausible for it (tagged v:<value>, n for "
    "NULL). Never granted: it links released groups back to source keys."
)


def upgrade() -> None:
    op.execute(
        f"""
        DO $$
        DECLARE part regclass;
        BEGIN
            FOR part IN SELECT inhrelid::regclass FROM pg_inherits
                        WHERE inhparent = 'dbanon.group_map'::regclass LOOP
                EXECUTE format('ALTER TABLE dbanon.group_map DETACH PARTITION %s', part);
                EXECUTE format('COMMENT ON TABLE %s IS %L', part, '{COMMENT}');
            END LOOP;
        END $$;
        DROP TABLE dbanon.group_map;
        """
    )


def downgrade() -> None:
    op.execute(
        """
        CREATE TABLE dbanon.group_map (
            release_id integer NOT NULL,
            key text NOT NULL,
            gid integer NOT NULL,
            vals text[],
            PRIMARY KEY (release_id, key)
        ) PARTITION BY LIST (release_id);
        DO $$
        DECLARE t record;
        BEGIN
            FOR t IN SELECT c.relname, substring(c.relname from 11)::int AS rid FROM pg_class c
                     JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = 'dbanon' AND c.relkind = 'r'
                       AND c.relname ~ '^group_map_[0-9]+$' LOOP
                EXECUTE format('ALTER TABLE dbanon.group_map ATTACH PARTITION dbanon.%I '
                               'FOR VALUES IN (%s)', t.relname, t.rid);
            END LOOP;
        END $$;
        COMMENT ON TABLE dbanon.group_map IS
            'Private: each source row of a grouping release, its group in the latest release and '
            'the sensitive values every release so far left plausible for it (tagged v:<value>, '
            'n for NULL). Never granted: it links released groups back to source keys.';
        """
    )

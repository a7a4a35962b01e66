"""The private row map of a perturbation release: one table per release, no shared table.

Every run of an ina or noise release deleted its rows from the shared dbanon.noise_map and
inserted a million new ones: each row checked against the foreign key to dbanon.release and
inserted at a random place of the primary key's index (row ids are random), the index grown
with every release's map. That was 6 to 10 s of a 20 s publish of a million rows. Now each
release's map is dbanon.noise_map_<release id> (row_id, key), as the group maps are (revision
0010): a run writes its map into a table of its own with one COPY, the checks join it as they
joined the run's staging table, and it replaces the old map by a rename. Row ids are distinct
by construction (the run draws them so); every reader joins the whole map by hash, so it has
no index. The downgrade writes every map back into dbanon.noise_map.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

COMMENT = (
    "Private: the source key of each row of a perturbation release (its dbanon_row), for "
    "`dbanon compare` and `dbanon check --release`. Never granted: it links released rows "
    "back to source keys."
)


def upgrade() -> None:
    op.execute(
        f"""
        DO $$
        DECLARE rid integer;
        BEGIN
            FOR rid IN SELECT DISTINCT release_id FROM dbanon.noise_map ORDER BY 1 LOOP
                EXECUTE format('CREATE TABLE dbanon.%I (row_id bigint NOT NULL, key text NOT NULL)',
                               'noise_map_' || rid);
                EXECUTE format('INSERT INTO dbanon.%I SELECT row_id, key FROM dbanon.noise_map '
                               'WHERE release_id = %s ORDER BY row_id', 'noise_map_' || rid, rid);
                EXECUTE format('COMMENT ON TABLE dbanon.%I IS %L', 'noise_map_' || rid,
                               '{COMMENT}');
            END LOOP;
        END $$;
        DROP TABLE dbanon.noise_map;
        """
    )


def downgrade() -> None:
    op.execute(
        """
        CREATE TABLE dbanon.noise_map (
            release_id integer NOT NULL REFERENCES dbanon.release ON DELETE CASCADE,
            row_id bigint NOT NULL,
            key text NOT NULL,
            PRIMARY KEY (release_id, row_id)
        );
        COMMENT ON TABLE dbanon.noise_map IS
            'Private: the source key of each row of a perturbation release (its dbanon_row), '
            'for `dbanon compare`. Never granted: it links released rows back to source keys.';
        DO $$
        DECLARE t record;
        BEGIN
            FOR t IN SELECT c.relname, substring(c.relname from 11)::int AS rid FROM pg_class c
                     JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = 'dbanon' AND c.relkind = 'r'
                       AND c.relname ~ '^noise_map_[0-9]+$' LOOP
                EXECUTE format('INSERT INTO dbanon.noise_map SELECT %s, row_id, key FROM dbanon.%I '
                               'WHERE EXISTS (SELECT FROM dbanon.release WHERE id = %s)',
                               t.rid, t.relname, t.rid);
                EXECUTE format('DROP TABLE dbanon.%I', t.relname);
            END LOOP;
        END $$;
        """
    )

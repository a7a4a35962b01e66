"""Catalog: hierarchies, releases, runs; SQL functions for generalisation and k-anonymity.

The SQL functions are in sql/, one file per function and revision (sql/0001_lca.sql is lca() as
this revision installs it): a shipped file is never edited, a change is a new file read by a new
revision (sql/FROZEN holds their hashes; tests/test_migration.py checks them), so a new database
gets what each revision had. The live definition of a function is the newest file that creates
it: k_anonymity() 0001's, lca() 0009's (generalize() was dropped by 0006).

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from alembic import op
from dbanon.sql import read

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None



def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE dbanon.hierarchy (
            id serial PRIMARY KEY,
            name text NOT NULL UNIQUE,
            height integer NOT NULL CHECK (height >= 1),
            created_at timestamptz NOT NULL DEFAULT now()
        );
        COMMENT ON TABLE dbanon.hierarchy IS 'Generalisation hierarchies (ARX format, balanced).';

        CREATE TABLE dbanon.hierarchy_node (
            hierarchy_id integer NOT NULL REFERENCES dbanon.hierarchy ON DELETE CASCADE,
            node_id integer NOT NULL,
            label text NOT NULL,
            level integer NOT NULL CHECK (level >= 0),
            parent_id integer,
            PRIMARY KEY (hierarchy_id, node_id),
            UNIQUE (hierarchy_id, level, label),
            FOREIGN KEY (hierarchy_id, parent_id) REFERENCES dbanon.hierarchy_node
        );
        COMMENT ON TABLE dbanon.hierarchy_node IS 'The tree: a node per (level, label).';

        CREATE TABLE dbanon.hierarchy_map (
            hierarchy_id integer NOT NULL REFERENCES dbanon.hierarchy ON DELETE CASCADE,
            value text NOT NULL,
            level integer NOT NULL,
            label text NOT NULL,
            PRIMARY KEY (hierarchy_id, value, level)
        );
        COMMENT ON TABLE dbanon.hierarchy_map IS
            'Each leaf value with its label at every level: generalisation is a join.';

        CREATE TABLE dbanon.release (
            id serial PRIMARY KEY,
            name text NOT NULL UNIQUE,
            spec jsonb NOT NULL,
            target_schema text NOT NULL,
            target_name text NOT NULL,
            objects text[] NOT NULL DEFAULT '{}',
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            UNIQUE (target_schema, target_name)
        );
        COMMENT ON TABLE dbanon.release IS 'Releases and the spec that rebuilds them.';
        COMMENT ON COLUMN dbanon.release.objects IS
            'The relations of the release in target_schema (Anatomy publishes two).';

        CREATE TABLE dbanon.run (
            id bigserial PRIMARY KEY,
            release_id integer NOT NULL REFERENCES dbanon.release ON DELETE CASCADE,
            status text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
            started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            finished_at timestamptz,
            source_rows bigint,
            released_rows bigint,
            metrics jsonb,
            timings jsonb,
            source_fingerprint text,
            error text
        );
        CREATE INDEX ON dbanon.run (release_id, started_at DESC);
        COMMENT ON TABLE dbanon.run IS 'Every publish or refresh of a release, with its figures.';
        """
    )
    for name in ("0001_generalize.sql", "0001_lca.sql", "0001_k_anonymity.sql"):
        op.execute(read(name))


def downgrade() -> None:
    op.execute(
        """
        DROP FUNCTION dbanon.k_anonymity(regclass, text[], integer);
        DROP FUNCTION dbanon.lca(text, text[]);
        DROP FUNCTION dbanon.generalize(text, text, integer);
        DROP TABLE dbanon.run, dbanon.release, dbanon.hierarchy_map, dbanon.hierarchy_node,
            dbanon.hierarchy;
        """
    )

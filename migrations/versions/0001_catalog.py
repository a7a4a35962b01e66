"""Catalog: hierarchies, releases, runs; SQL functions for generalisation and k-anonymity.

Each migration carries the SQL it runs, frozen as it was written: a migration reading a file
that later changes would install, on a new database, something its revision never had (this one
once read sql/hierarchy.sql, which 0009 could then no longer change). The live definition of a
function is in the newest migration that creates it: k_anonymity() here, lca() in 0009
(generalize() was dropped by 0006).

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Generalisation over the hierarchies stored in the catalog (dbanon.hierarchy_map holds, for each
# leaf value, its label at every level). Hierarchies are balanced, so the lowest common ancestor of
# a set of leaves is the label at the lowest level where all of them agree.
HIERARCHY = """
CREATE FUNCTION dbanon.generalize(hierarchy text, val text, lvl integer)
RETURNS text LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT m.label
    FROM dbanon.hierarchy_map m JOIN dbanon.hierarchy h ON h.id = m.hierarchy_id
    WHERE h.name = hierarchy AND m.value = val AND m.level = lvl
$$;

COMMENT ON FUNCTION dbanon.generalize(text, text, integer) IS
    'Label of a leaf value at a hierarchy level (0 = the value itself); NULL when not a leaf.';

CREATE FUNCTION dbanon.lca(hierarchy text, vals text[])
RETURNS text LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT min(m.label)
    FROM dbanon.hierarchy_map m JOIN dbanon.hierarchy h ON h.id = m.hierarchy_id
    WHERE h.name = hierarchy AND m.value = ANY (vals)
    GROUP BY m.level
    HAVING count(DISTINCT m.label) = 1
       AND count(DISTINCT m.value) = (SELECT count(DISTINCT v) FROM unnest(vals) v)
    ORDER BY m.level
    LIMIT 1
$$;

COMMENT ON FUNCTION dbanon.lca(text, text[]) IS
    'Label of the lowest common ancestor of a set of leaf values; NULL if one is not a leaf.';
"""

# The k-anonymity audit as an SQL function, for DBAs who check relations from psql or from their
# own jobs: equivalence classes are the GROUP BY over the quasi-identifiers. Identifiers are
# quoted with format('%I'), so any column name works.
K_ANONYMITY = """
CREATE FUNCTION dbanon.k_anonymity(rel regclass, qi text[], k integer,
    OUT holds boolean, OUT classes bigint, OUT min_class_size bigint,
    OUT rows_in_small_classes bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    cols text;
BEGIN
    IF k < 1 THEN
        RAISE EXCEPTION 'k must be at least 1, got %', k;
    END IF;
    SELECT string_agg(format('%I', c), ', ') INTO cols FROM unnest(qi) c;
    EXECUTE format(
        'SELECT count(*), min(n), coalesce(sum(n) FILTER (WHERE n < $1), 0)
         FROM (SELECT count(*) AS n FROM %s GROUP BY %s) classes', rel, cols)
    INTO classes, min_class_size, rows_in_small_classes USING k;
    holds := coalesce(min_class_size >= k, true);
END
$$;

COMMENT ON FUNCTION dbanon.k_anonymity(regclass, text[], integer) IS
    'Equivalence classes of rel over the columns qi, and whether each has at least k rows.';
"""


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
    op.execute(HIERARCHY)
    op.execute(K_ANONYMITY)


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

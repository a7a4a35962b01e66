"""The private map writes each set once: a row points at its plausible values and at what its
group showed instead of carrying both.

Until this revision every map row held its plausible values and its whole group's shown
values as arrays: a million-row release kept a 650 MB map, and writing it was the dearest
step of a publish (dbanon/setlogic/composition.py). Now dbanon.group_map_<id> keeps (release_id,
key, gid, vid, sid, fp); dbanon.group_map_<id>_sets (vid, vals) each distinct set of
plausible values once, sorted, numbered in their order; dbanon.group_map_<id>_shown (sid,
shown) what each group showed. The key is no longer indexed: every reader joins the whole map
by hash. The downgrade writes the arrays back into each row.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

COMMENT = (
    "Private: each source row of a grouping release, its group in the latest release and the "
    "sensitive values every release so far left plausible for it (tagged v:<value>, n for "
    "NULL), a fingerprint of its released columns and the values its group showed. Never "
    "granted: it links released groups back to source keys."
)


def _each_map(body: str) -> str:
    """Run `body` (a format() string with %1$I the map's name) for every release's map."""
    return f"""
        DO $$
        DECLARE t text;
        BEGIN
            FOR t IN SELECT c.relname FROM pg_class c
                     JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = 'dbanon' AND c.relkind = 'r'
                       AND c.relname ~ '^group_map_[0-9]+$' LOOP
                {body}
            END LOOP;
        END $$;"""


SORTED = "ARRAY(SELECT DISTINCT v FROM unnest(m.vals) v ORDER BY 1)"


def upgrade() -> None:
    op.execute(_each_map(f"""
        EXECUTE format('CREATE TABLE dbanon.%1$I AS SELECT (dense_rank() OVER (ORDER BY vals)
            - 1)::int4 AS vid, vals FROM (SELECT DISTINCT {SORTED} AS vals FROM dbanon.%2$I m
            WHERE m.vals IS NOT NULL) d', t || '_sets', t);
        EXECUTE format('CREATE TABLE dbanon.%1$I AS SELECT (dense_rank() OVER (ORDER BY shown)
            - 1)::int4 AS sid, shown FROM (SELECT DISTINCT shown FROM dbanon.%2$I
            WHERE shown IS NOT NULL) d', t || '_shown', t);
        EXECUTE format('CREATE TABLE dbanon.%1$I AS SELECT m.release_id, m.key, m.gid, s.vid,
            h.sid, m.fp FROM dbanon.%2$I m LEFT JOIN dbanon.%3$I s ON s.vals = {SORTED}
            LEFT JOIN dbanon.%4$I h ON h.shown = m.shown',
            t || '_next', t, t || '_sets', t || '_shown');
        EXECUTE format('DROP TABLE dbanon.%1$I', t);
        EXECUTE format('ALTER TABLE dbanon.%1$I RENAME TO %2$I', t || '_next', t);
        EXECUTE format('ALTER TABLE dbanon.%1$I ALTER release_id SET NOT NULL,
            ALTER key SET NOT NULL, ALTER gid SET NOT NULL', t);
        EXECUTE format('ALTER TABLE dbanon.%1$I ALTER vid SET NOT NULL, ALTER vals SET NOT NULL',
            t || '_sets');
        EXECUTE format('ALTER TABLE dbanon.%1$I ALTER sid SET NOT NULL', t || '_shown');
        EXECUTE format('COMMENT ON TABLE dbanon.%1$I IS %2$L', t, '{COMMENT}');
        EXECUTE format('COMMENT ON TABLE dbanon.%1$I IS %2$L', t || '_sets', '{COMMENT}');
        EXECUTE format('COMMENT ON TABLE dbanon.%1$I IS %2$L', t || '_shown', '{COMMENT}');"""))


def downgrade() -> None:
    op.execute(_each_map(f"""
        EXECUTE format('CREATE TABLE dbanon.%1$I (release_id integer NOT NULL, key text NOT NULL,
            gid integer NOT NULL, vals text[], fp text, shown text[])', t || '_next');
        EXECUTE format('INSERT INTO dbanon.%1$I SELECT m.release_id, m.key, m.gid, s.vals, m.fp,
            h.shown FROM dbanon.%2$I m LEFT JOIN dbanon.%3$I s USING (vid)
            LEFT JOIN dbanon.%4$I h USING (sid)', t || '_next', t, t || '_sets', t || '_shown');
        EXECUTE format('DROP TABLE dbanon.%1$I, dbanon.%2$I, dbanon.%3$I',
            t, t || '_sets', t || '_shown');
        EXECUTE format('ALTER TABLE dbanon.%1$I RENAME TO %2$I', t || '_next', t);
        EXECUTE format('ALTER TABLE dbanon.%1$I ADD CONSTRAINT %2$I PRIMARY KEY (release_id, key)',
            t, t || '_pkey');
        EXECUTE format('COMMENT ON TABLE dbanon.%1$I IS %2$L', t, '{COMMENT}');"""))

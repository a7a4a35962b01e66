"""The release store: the private schema that holds the relations behind every release.

A consumer reads a release through a view of the release's name in the target schema, and that
view selects from a relation here. A refresh builds the new relation here, points the view at it
(CREATE OR REPLACE VIEW, which keeps every object a consumer built over the view) and drops the
old one. Consumers never get USAGE on this schema, so nothing they create can depend on what a
refresh drops: with the relations in the target schema, a consumer's temporary view over a
release made every refresh fail ("cannot drop table ... because other objects depend on it").

Releases published before this revision keep their table in the target schema until their next
refresh replaces it by a view (the swap in dbanon.release).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE SCHEMA dbanon_store;
        REVOKE ALL ON SCHEMA dbanon_store FROM PUBLIC;
        COMMENT ON SCHEMA dbanon_store IS 'Private: the relations behind the released views '
            '(dbanon). Never granted: consumers read the views in the release schemas.';
        """
    )


def downgrade() -> None:
    """Each release's relation goes back to its view's place (name, comment, SELECT grants), as
    revisions before this one kept it; a view someone built over a release stops the downgrade
    (DROP VIEW without CASCADE)."""
    op.execute(
        """
        DO $$
        DECLARE
            v record;
            g record;
            kind text;
        BEGIN
            FOR v IN
                SELECT DISTINCT ON (vc.oid) vc.oid, vn.nspname AS vschema, vc.relname AS vname,
                       sc.relname AS sname, sc.relkind AS skind,
                       obj_description(vc.oid, 'pg_class') AS note
                FROM pg_class vc
                JOIN pg_namespace vn ON vn.oid = vc.relnamespace
                JOIN pg_rewrite rw ON rw.ev_class = vc.oid
                JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = rw.oid
                                AND d.refclassid = 'pg_class'::regclass
                JOIN pg_class sc ON sc.oid = d.refobjid
                WHERE vc.relkind = 'v' AND sc.oid <> vc.oid
                  AND sc.relnamespace = 'dbanon_store'::regnamespace
            LOOP
                kind := CASE v.skind WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END;
                CREATE TEMP TABLE IF NOT EXISTS dbanon_grants (role text) ON COMMIT DROP;
                DELETE FROM dbanon_grants;
                INSERT INTO dbanon_grants
                    SELECT CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END
                    FROM aclexplode((SELECT relacl FROM pg_class WHERE oid = v.oid)) a
                    LEFT JOIN pg_roles r ON r.oid = a.grantee
                    WHERE a.privilege_type = 'SELECT'
                      AND a.grantee <> (SELECT relowner FROM pg_class WHERE oid = v.oid);
                EXECUTE format('DROP VIEW %I.%I', v.vschema, v.vname);
                EXECUTE format('ALTER %s dbanon_store.%I SET SCHEMA %I', kind, v.sname,
                               v.vschema);
                EXECUTE format('ALTER %s %I.%I RENAME TO %I', kind, v.vschema, v.sname, v.vname);
                EXECUTE format('COMMENT ON %s %I.%I IS %L', kind, v.vschema, v.vname, v.note);
                FOR g IN SELECT role FROM dbanon_grants LOOP
                    EXECUTE format('GRANT SELECT ON %I.%I TO %s', v.vschema, v.vname, g.role);
                END LOOP;
            END LOOP;
        END $$;
        DROP SCHEMA dbanon_store;
        """
    )

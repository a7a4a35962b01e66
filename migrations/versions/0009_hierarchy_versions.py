"""Hierarchies a release depends on are frozen: versions, and releases pinned to them.

A hierarchy row gets `version` (a hash of its content, as dbanon.hierarchy.Hierarchy.version)
and `retired_at`: `hierarchy import --replace --force` retires the current row and adds one, so
a name has one current version and, while releases still pin them, retired ones. A release
records the versions it was verified with (`release.hierarchy_versions`, name -> version); a
live full-domain view reads its hierarchy by name and version, so rows it reads never change
under it, and a retired version is deleted once no release pins it.

Revision ID: 0009
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op
from dbanon.sql import read

revision = "0009"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE dbanon.hierarchy ADD COLUMN version text, ADD COLUMN retired_at timestamptz;
        UPDATE dbanon.hierarchy h SET version = (
            SELECT encode(sha256(convert_to(
                       string_agg(r, E'\\x1e' ORDER BY value COLLATE "C"), 'UTF8')), 'hex')
            FROM (SELECT value, string_agg(label, E'\\x1f' ORDER BY level) AS r
                  FROM dbanon.hierarchy_map WHERE hierarchy_id = h.id GROUP BY value) x);
        ALTER TABLE dbanon.hierarchy ALTER COLUMN version SET NOT NULL;
        ALTER TABLE dbanon.hierarchy DROP CONSTRAINT hierarchy_name_key;
        CREATE UNIQUE INDEX hierarchy_current ON dbanon.hierarchy (name)
            WHERE retired_at IS NULL;
        ALTER TABLE dbanon.hierarchy ADD CONSTRAINT hierarchy_name_version_key
            UNIQUE (name, version);
        COMMENT ON COLUMN dbanon.hierarchy.version IS
            'SHA-256 of the content (dbanon.hierarchy.Hierarchy.version).';
        COMMENT ON COLUMN dbanon.hierarchy.retired_at IS
            'Set when replaced (--force): kept while a release pins this version.';

        ALTER TABLE dbanon.release
            ADD COLUMN hierarchy_versions jsonb NOT NULL DEFAULT '{}';
        COMMENT ON COLUMN dbanon.release.hierarchy_versions IS
            'Hierarchy name -> version the latest run was verified with (pins it).';
        UPDATE dbanon.release r SET hierarchy_versions = coalesce((
            SELECT jsonb_object_agg(h.name, h.version) FROM dbanon.hierarchy h
            WHERE h.name IN (SELECT value FROM jsonb_each_text(r.spec -> 'hierarchies')
                             UNION SELECT m ->> 'hierarchy'
                                   FROM jsonb_array_elements(r.spec -> 'models') m)), '{}');
        """
    )
    op.execute(read("0009_lca.sql"))


def downgrade() -> None:
    op.execute(
        """
        DELETE FROM dbanon.hierarchy WHERE retired_at IS NOT NULL;
        ALTER TABLE dbanon.release DROP COLUMN hierarchy_versions;
        ALTER TABLE dbanon.hierarchy DROP CONSTRAINT hierarchy_name_version_key;
        DROP INDEX dbanon.hierarchy_current;
        ALTER TABLE dbanon.hierarchy ADD CONSTRAINT hierarchy_name_key UNIQUE (name);
        """
    )
    op.execute(read("0001_lca.sql"))  # as revision 0001 installed it
    op.execute("ALTER TABLE dbanon.hierarchy DROP COLUMN version, DROP COLUMN retired_at")

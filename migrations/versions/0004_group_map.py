"""The private row-to-group map of each grouping release, for refreshes that keep groups.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE dbanon.group_map (
            release_id integer NOT NULL REFERENCES dbanon.release ON DELETE CASCADE,
            key text NOT NULL,
            gid integer NOT NULL,
            vals text[],
            PRIMARY KEY (release_id, key)
        );
        COMMENT ON TABLE dbanon.group_map IS
            'Private: each source row of a grouping release, its group in the latest release and '
            'the sensitive values every release so far left plausible for it (tagged v:<value>, '
            'n for NULL). Never granted: it links released groups back to source keys.';
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE dbanon.group_map")

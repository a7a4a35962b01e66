"""Run trail states (running, succeeded, failed, skipped, refused, abandoned) and schedules.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE dbanon.run DROP CONSTRAINT run_status_check;
        ALTER TABLE dbanon.run ADD CONSTRAINT run_status_check CHECK (status IN
            ('running', 'succeeded', 'failed', 'skipped', 'refused', 'abandoned'));
        ALTER TABLE dbanon.run ADD COLUMN pid integer;
        COMMENT ON COLUMN dbanon.run.pid IS
            'Backend of a running run: a run still running whose backend is gone was killed.';

        CREATE TABLE dbanon.schedule (
            release_id integer PRIMARY KEY REFERENCES dbanon.release ON DELETE CASCADE,
            every interval CHECK (every > interval '0'),
            cron text,
            created_at timestamptz NOT NULL DEFAULT now(),
            CHECK ((every IS NULL) <> (cron IS NULL))
        );
        COMMENT ON TABLE dbanon.schedule IS
            'When `dbanon refresh --due` refreshes a release: an interval or a cron expression.';
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP TABLE dbanon.schedule;
        ALTER TABLE dbanon.run DROP COLUMN pid;
        UPDATE dbanon.run SET status = 'failed' WHERE status NOT IN ('running', 'succeeded');
        ALTER TABLE dbanon.run DROP CONSTRAINT run_status_check;
        ALTER TABLE dbanon.run ADD CONSTRAINT run_status_check
            CHECK (status IN ('running', 'succeeded', 'failed'));
        """
    )

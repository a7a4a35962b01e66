"""Alembic migrations of the dbanon catalog (package data: dbanon.migrations)."""

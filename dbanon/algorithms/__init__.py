"""Anonymisation algorithms: pure code, arrays in, group ids out (no database access)."""

"""Reproductions of the papers' experiments, writing CSV and PNG."""

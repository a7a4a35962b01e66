"""Utility metrics of a release: information loss, class-size statistics."""

"""SQL installed into the database by the migrations (package data: dbanon.sql)."""

from importlib.resources import files


def read(name: str) -> str:
    """The text of sql/NAME."""
    return files(__name__).joinpath(name).read_text(encoding="utf-8")

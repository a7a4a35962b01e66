"""SQL the migrations install into the database, one file per function and revision.

`NNNN_name.sql` is what revision NNNN runs; the newest file that creates a function holds its
live definition. A shipped file is never edited (FROZEN lists each file's SHA-256, and a test
holds them to it): a change is a new file read by a new revision, so a database created today
gets exactly what each revision installed. Shipped inside the package as dbanon.sql.
"""

from __future__ import annotations

from importlib.resources import files


def read(name: str) -> str:
    """The text of sql/NAME."""
    return (files(__name__) / name).read_text()

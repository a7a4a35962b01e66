"""dbanon: PostgreSQL-native data anonymisation. Python orchestrates, PostgreSQL computes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dbanon.api import Database
    from dbanon.release import PublishResult, ReleaseSpec

__all__ = ["Database", "PublishResult", "ReleaseSpec"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """The API on first use: `import dbanon.cli` (or any submodule) imports only what it needs."""
    if name == "Database":
        from dbanon.api import Database

        return Database
    if name in ("PublishResult", "ReleaseSpec"):
        from dbanon import release

        return getattr(release, name)
    raise AttributeError(f"module 'dbanon' has no attribute {name!r}")

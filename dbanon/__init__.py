"""dbanon: PostgreSQL-native data anonymisation. Python orchestrates, PostgreSQL computes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dbanon.api import Database
    from dbanon.core.spec import ReleaseSpec
    from dbanon.lifecycle.publish import PublishResult

__all__ = ["Database", "PublishResult", "ReleaseSpec"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """The API on first use: `import dbanon.cli` (or any submodule) imports only what it needs."""
    if name == "Database":
        from dbanon.api import Database

        return Database
    if name == "PublishResult":
        from dbanon.lifecycle.publish import PublishResult

        return PublishResult
    if name == "ReleaseSpec":
        from dbanon.core.spec import ReleaseSpec

        return ReleaseSpec
    raise AttributeError(f"module 'dbanon' has no attribute {name!r}")

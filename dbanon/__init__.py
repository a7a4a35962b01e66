"""dbanon: PostgreSQL-native data anonymisation. Python orchestrates, PostgreSQL computes."""

from dbanon.api import Database
from dbanon.release import PublishResult, ReleaseSpec

__all__ = ["Database", "PublishResult", "ReleaseSpec"]
__version__ = "0.1.0"

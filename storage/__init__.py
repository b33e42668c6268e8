"""Storage: every SQL statement rflow runs, one module per table group.

The schema is created by the numbered migrations in ``migrations/``; psycopg's
exceptions are translated to :class:`StorageError` subclasses and never leak out.
"""

from rflow.storage.db import check_schema, connect, pool
from rflow.storage.errors import (
    InvalidValue,
    MigrationError,
    StorageError,
    Unavailable,
    UniqueViolation,
)
from rflow.storage.migrate import available, migrate, pending

__all__ = [
    "InvalidValue",
    "MigrationError",
    "StorageError",
    "Unavailable",
    "UniqueViolation",
    "available",
    "check_schema",
    "connect",
    "migrate",
    "pending",
    "pool",
]

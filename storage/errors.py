"""Storage errors: psycopg's exceptions never leave :mod:`rflow.storage`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import errors as pg_errors


class StorageError(Exception):
    """A database operation failed."""


class Unavailable(StorageError):
    """The database cannot be reached (connection refused, restarting, timed out)."""


class UniqueViolation(StorageError):
    """A row with the same unique key exists."""


class InvalidValue(StorageError):
    """Postgres refused a value as data (a NUL in text, a number out of range...): the
    input is at fault, not the database."""


class MigrationError(StorageError):
    """The schema cannot be brought to the code's version."""


@contextmanager
def translated() -> Iterator[None]:
    """Re-raise psycopg errors as :class:`StorageError` subclasses."""
    try:
        yield
    except pg_errors.UniqueViolation as exc:
        raise UniqueViolation(str(exc)) from exc
    except psycopg.OperationalError as exc:
        raise Unavailable(str(exc)) from exc
    except psycopg.DataError as exc:
        raise InvalidValue(str(exc)) from exc
    except psycopg.Error as exc:
        raise StorageError(str(exc)) from exc

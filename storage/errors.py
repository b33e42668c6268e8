"""Storage errors (psycopg's exceptions never leave :mod:`rflow.storage`), and values made
fit for what Postgres refuses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb


class StorageError(Exception):
    """A database operation failed."""


class Unavailable(StorageError):
    """The database cannot be reached (connection refused, restarting, timed out)."""


class UniqueViolation(StorageError):
    """A row with the same unique key exists."""


class InvalidValue(StorageError):
    """Postgres refused a value as data (a NUL in text, a number out of range...): the
    input is at fault, not the database."""


def storable(value: Any) -> Any:
    """``value`` with every NUL in its text (JSON keys and strings included) as U+FFFD:
    Postgres text and jsonb cannot hold NUL."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, Jsonb):
        return Jsonb(storable(value.obj))
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(storable(v) for v in value)
    return value


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

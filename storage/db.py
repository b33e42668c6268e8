"""Connections to the rflow database, bound to one schema."""

from __future__ import annotations

import re

import psycopg
from psycopg.types.json import set_json_dumps, set_json_loads
from psycopg_pool import AsyncConnectionPool

from rflow.codecs import json
from rflow.settings import Settings
from rflow.storage.errors import Unavailable, translated

_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def check_schema(schema: str) -> str:
    """``schema`` if it is a plain lower-case identifier (it is interpolated into SQL)."""
    if not _SCHEMA.match(schema):
        raise ValueError(f"invalid schema name {schema!r}: use lower-case letters, digits and _")
    return schema


def use_rflow_json(conn: psycopg.AsyncConnection) -> None:
    """JSON columns of ``conn`` written and read with rflow's codec (orjson, integers of
    any size exact) instead of the standard library's."""
    set_json_dumps(json.dumps_exact, conn)
    set_json_loads(json.loads, conn)


async def _configure(conn: psycopg.AsyncConnection) -> None:
    use_rflow_json(conn)


async def connect(settings: Settings, *, autocommit: bool = True) -> psycopg.AsyncConnection:
    """Open a connection whose search_path is the configured schema."""
    schema = check_schema(settings.database_schema)
    try:
        with translated():
            conn = await psycopg.AsyncConnection.connect(
                settings.database_url.get_secret_value(),
                autocommit=autocommit,
                connect_timeout=5,
                options=f"-c search_path={schema}",
            )
    except Unavailable as exc:
        raise Unavailable(f"cannot reach Postgres at {settings.database_display}: {exc}") from None
    use_rflow_json(conn)
    return conn


def pool(settings: Settings, *, min_size: int = 1, max_size: int = 8) -> AsyncConnectionPool:
    """A connection pool on the configured schema; open it with ``await p.open()``."""
    schema = check_schema(settings.database_schema)
    return AsyncConnectionPool(
        settings.database_url.get_secret_value(),
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True, "options": f"-c search_path={schema}", "connect_timeout": 5},
        open=False,
        name="rflow",
        configure=_configure,
    )

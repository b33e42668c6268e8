"""The Faust codec of rflow's tables and changelogs: JSON through :mod:`rflow.codecs.json`.

Faust's default for table values is pickle-free JSON already, but through the stdlib;
registering ours keeps big integers exact and every byte on Kafka in one format.
"""

from __future__ import annotations

from typing import Any

from faust.serializers import codecs as faust_codecs

from rflow.codecs import json

CODEC_NAME = "rflow-json"


class JSONCodec(faust_codecs.Codec):
    """Table keys and values as rflow JSON."""

    def _dumps(self, obj: Any) -> bytes:
        return json.dumps(obj)

    def _loads(self, s: bytes) -> Any:
        return json.loads(s)


def register() -> str:
    """Register the codec with Faust (idempotent); returns its name."""
    if CODEC_NAME not in faust_codecs.codecs:
        faust_codecs.register(CODEC_NAME, JSONCodec())
    return CODEC_NAME

"""The JSON Schema of workflow files, generated from the model for editors."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from rflow.docstrings import field_docstrings
from rflow.lang.model.project import Project
from rflow.lang.units import format_duration

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class _Generator(GenerateJsonSchema):
    # Defaults are shown as people write them ("24h"), not as ISO 8601 ("P1D").
    def encode_default(self, dflt: Any) -> Any:
        if isinstance(dflt, timedelta):
            return format_duration(dflt)
        if isinstance(dflt, BaseModel):
            return dflt.model_dump(mode="json", by_alias=True)
        return super().encode_default(dflt)

    # A field's docstring is its description (the models do not read them as they load).
    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        json_schema = super().model_schema(schema)
        model = schema["cls"]
        properties = json_schema.get("properties", {})
        for name, text in field_docstrings(model).items():
            info = model.model_fields[name]
            field = properties.get(info.alias or name)
            if field is not None and info.description is None:
                field["description"] = text
        return json_schema


def project_schema() -> dict[str, Any]:
    """The JSON Schema of one workflow file (or a whole project: they share a shape).

    Every section is optional in the schema because a folder's files each hold part of
    the project; ``rflow validate`` checks the merged whole.
    """
    schema = Project.model_json_schema(by_alias=True, schema_generator=_Generator)
    return {"$schema": SCHEMA_DIALECT, **schema}


def schema_text() -> str:
    """:func:`project_schema` as stable, indented JSON with a trailing newline."""
    return json.dumps(project_schema(), indent=2, ensure_ascii=False) + "\n"

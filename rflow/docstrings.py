"""Field descriptions of the language's models, read from the docstrings under the fields.

A model documents a field with a string right under it::

    class Retry(Model):
        max_attempts: int = 3
        \"\"\"Attempts in total, the first included.\"\"\"

Pydantic can read these itself (``use_attribute_docstrings``), but it parses each
class's source as the class is created, which was a third of what ``rflow validate``
spent starting. Only the JSON Schema and the reference need them, so they are read
here, one parse per module, when first asked for.
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import sys

from pydantic import BaseModel


@functools.cache
def _module(name: str) -> dict[str, dict[str, str]]:
    """Each top-level class of module ``name`` -> its attributes' docstrings."""
    tree = ast.parse(inspect.getsource(sys.modules[name]))
    return {
        node.name: _attributes(node.body) for node in tree.body if isinstance(node, ast.ClassDef)
    }


def _attributes(body: list[ast.stmt]) -> dict[str, str]:
    found = {}
    for statement, following in itertools.pairwise(body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            found[statement.target.id] = inspect.cleandoc(following.value.value)
    return found


def field_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Each field of ``model`` (by attribute name) that has a docstring -> the docstring.

    A field inherited from a base class has the base's docstring unless the model
    documents it again.
    """
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if cls.__module__.startswith("rflow."):
            found.update(_module(cls.__module__).get(cls.__qualname__, {}))
    return {name: text for name, text in found.items() if name in model.model_fields}


def field_description(model: type[BaseModel], name: str) -> str | None:
    """What documents field ``name`` of ``model``: its ``description``, else its docstring."""
    field = model.model_fields[name]
    return field.description or field_docstrings(model).get(name)

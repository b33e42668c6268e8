"""Docstrings of class attributes: the string right under a field or an enum member.

A model documents a field, and an enum a member, with a string under it::

    class Retry(Model):
        max_attempts: int = 3
        \"\"\"Attempts in total, the first included.\"\"\"

Pydantic can read these itself (``use_attribute_docstrings``), but it parses each
class's source as the class is created, which was a third of what ``rflow validate``
spent starting. Only the JSON Schema and the reference (``docs/``) need them, so they
are read here, one parse per module, when first asked for.
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
        if not (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            continue
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            found[statement.target.id] = inspect.cleandoc(following.value.value)
        elif (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            found[statement.targets[0].id] = inspect.cleandoc(following.value.value)
    return found


def attribute_docstrings(cls: type) -> dict[str, str]:
    """Each attribute of ``cls`` (or of an rflow base class) that has a docstring -> it."""
    found: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if base.__module__.startswith("rflow."):
            found.update(_module(base.__module__).get(base.__qualname__, {}))
    return found


def field_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Each field of ``model`` (by attribute name) that has a docstring -> the docstring.

    A field inherited from a base class has the base's docstring unless the model
    documents it again.
    """
    found = attribute_docstrings(model)
    return {name: text for name, text in found.items() if name in model.model_fields}


def field_description(model: type[BaseModel], name: str) -> str | None:
    """What documents field ``name`` of ``model``: its ``description``, else its docstring."""
    field = model.model_fields[name]
    return field.description or field_docstrings(model).get(name)

"""Only the consumption layer relies on private names of faust, aiokafka and mode.

Every other module of rflow is read for the three ways to rely on one: importing a
private name from those libraries, overriding (or calling through ``super()``) a private
method of a class of theirs, and reading or writing a private attribute of an object that
is not the module's own (``self``/``cls``).
"""

from __future__ import annotations

import ast
import importlib
import inspect

from tests.conftest import REPO

LIBRARIES = ("faust", "aiokafka", "mode")
ALLOWED = REPO / "streams" / "consumption.py"
OWN = ("self", "cls")
PUBLIC_PROTOCOL = {
    "_dumps",  # faust's documented way to write a codec: subclass Codec, define these two
    "_loads",
    "_tasks",  # filled by mode's public @Service.task decorator
    "_abc_impl",  # the abc module's bookkeeping
}


def project_modules() -> list:
    found = []
    for folder in ("rflow", "streams", "agents", "codecs", "storage"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path != ALLOWED and path.name != "__main__.py":
                found.append(path)
    return found


def test_no_module_but_consumption_imports_a_private_name_of_the_streaming_libraries():
    found = []
    for path in project_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARIES:
                for alias in node.names:
                    if alias.name.startswith("_") or any(
                        part.startswith("_") for part in node.module.split(".")
                    ):
                        found.append(
                            f"{path.relative_to(REPO)}: from {node.module} import {alias.name}"
                        )
    assert found == []


def test_no_module_but_consumption_touches_a_private_attribute_of_another_object():
    found = []
    for path in project_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
                continue
            if node.attr.startswith("__"):
                continue  # dunders are public protocol
            receiver = node.value
            if isinstance(receiver, ast.Name) and receiver.id in OWN:
                continue
            if isinstance(receiver, ast.Call) and getattr(receiver.func, "id", "") == "super":
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: super().{node.attr}")
                continue
            if (
                isinstance(receiver, ast.Name)
                and receiver.id.islower()
                and node.attr in {"_" + name.lstrip("_") for name in _library_private_names()}
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {receiver.id}.{node.attr}")
    assert found == []


def test_no_class_outside_consumption_overrides_a_private_method_of_the_libraries():
    found = []
    for path in project_modules():
        module_name = _module_name(path)
        try:
            module = importlib.import_module(module_name)
        except Exception:  # a script-like module: nothing to inspect
            continue
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            library_bases = [
                base for base in cls.__mro__[1:] if base.__module__.split(".")[0] in LIBRARIES
            ]
            for name in vars(cls):
                private = name.startswith("_") and not name.startswith("__")
                private = private and name not in PUBLIC_PROTOCOL
                if private and any(name in vars(base) for base in library_bases):
                    found.append(f"{module_name}.{cls.__name__}.{name}")
    assert found == []


def _module_name(path) -> str:
    relative = path.relative_to(REPO).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if parts[0] != "rflow":
        parts = ["rflow", *parts]
    return ".".join(parts)


_NAMES: set[str] | None = None


def _library_private_names() -> set[str]:
    """Every private attribute name the streaming libraries define on their classes."""
    global _NAMES
    if _NAMES is None:
        import aiokafka.consumer.consumer
        import aiokafka.producer.producer
        import faust.app.base
        import faust.tables.base
        import faust.tables.manager
        import faust.transport.consumer
        import faust.transport.drivers.aiokafka
        import faust.transport.producer
        import mode.services
        import mode.utils.queues

        modules = [
            aiokafka.consumer.consumer,
            aiokafka.producer.producer,
            faust.app.base,
            faust.tables.base,
            faust.tables.manager,
            faust.transport.consumer,
            faust.transport.drivers.aiokafka,
            faust.transport.producer,
            mode.services,
            mode.utils.queues,
        ]
        names: set[str] = set()
        for module in modules:
            source = inspect.getsource(module)
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                    names.add(node.attr)
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
                    node.name.startswith("_") and not node.name.startswith("__")
                ):
                    names.add(node.name)
        _NAMES = {name for name in names if not name.startswith("__")}
    return _NAMES

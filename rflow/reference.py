"""The reference in ``docs/``: the parts generated from the code, and what must be covered.

Each page of ``docs/`` is written by hand around blocks marked::

    <!-- generated: NAME -->
    ...
    <!-- end: NAME -->

whose text :func:`render` produces from the code: the workflow files' models and fields
(from the JSON Schema, descriptions from the docstrings under the fields), the
expression functions with their examples, the failure kinds, the metrics, the settings
and the CLI's commands. ``scripts/docs`` rewrites the blocks (``--check`` only compares);
``tests/unit/test_reference.py`` fails when a block is out of date and when something
has no description (:func:`gaps`), saying where to write it.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
_BLOCK = re.compile(
    r"^(<!-- generated: (?P<name>[^ ]+) -->\n)(?P<body>.*?)^(<!-- end: (?P=name) -->)",
    re.S | re.M,
)

# --- small markdown helpers --------------------------------------------------------


def _cell(text: str) -> str:
    """``text`` fit for a table cell: one line, pipes escaped, RST literals as code, and
    ``<`` outside code written as ``&lt;`` (``<NAME>`` would read as an HTML tag)."""
    parts = " ".join(text.replace("``", "`").split()).replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _code(value: Any) -> str:
    return "`" + (value if isinstance(value, str) else json.dumps(value)) + "`"


def _anchor(model: str) -> str:
    return model.lower()


# --- workflow files: the JSON Schema ----------------------------------------------

_PATTERNS = {
    r"\$\{\{": "expression",
    r"^\s*([0-9]+(\.[0-9]+)?\s*[A-Za-z]+\s*)+$": "duration",
    r"^\s*[0-9][0-9_]*(\.[0-9][0-9_]*)?\s*([A-Za-z]+)?\s*$": "amount",
    r"^[0-9][0-9_]*$": "whole number as text",
    r"^[A-Za-z_][A-Za-z0-9_-]*$": "name",
    r"^[A-Za-z_][A-Za-z0-9_]*$": "variable name",
    r"^0x[0-9a-fA-F]{40}$": "address",
}
"""Patterns of the schema's strings, by what a person calls them."""


def _schema() -> dict[str, Any]:
    from rflow.lang.schema import project_schema

    return project_schema()


def _type(node: dict[str, Any]) -> str:
    """How a person would name the type of schema ``node``."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{_anchor(name)})"
    if "const" in node:
        return _code(node["const"])
    if "enum" in node:
        return " or ".join(_code(value) for value in node["enum"])
    for key in ("anyOf", "oneOf"):
        if key in node:
            parts: list[str] = []
            for option in node[key]:
                if option.get("type") != "null" and (text := _type(option)) not in parts:
                    parts.append(text)
            return " or ".join(parts)
    kind = node.get("type")
    if kind == "array":
        items = node.get("items")
        return "list of " + _type(items) if items else "list"
    if kind == "object":
        values = node.get("additionalProperties")
        if not isinstance(values, dict):
            values = next(iter(node.get("patternProperties", {}).values()), None)
        return "mapping of name to " + _type(values) if values else "mapping"
    if kind == "string":
        return _PATTERNS.get(node.get("pattern", ""), "text")
    if kind == "integer":
        low, high = node.get("minimum"), node.get("maximum")
        if low is not None and high is not None:
            return f"integer, {low} to {high}"
        return "integer" + (f" ≥ {low}" if low is not None else "")
    if kind == "number":
        return "number"
    if kind == "boolean":
        return "true or false"
    return "any value"


def _default(name: str, node: dict[str, Any], required: list[str]) -> str:
    if name in required:
        return "required"
    if "default" not in node:
        return "-"
    default = node["default"]
    if default in (None, [], {}):
        return "-"
    return _code(default)


def _models(schema: dict[str, Any]) -> list[str]:
    """Every model of ``schema``, each right after the first model that uses it."""
    order: list[str] = []

    def refs(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            if "$ref" in node:
                yield node["$ref"].rsplit("/", 1)[1]
            for key, value in node.items():
                if key != "default":
                    yield from refs(value)
        elif isinstance(node, list):
            for value in node:
                yield from refs(value)

    def visit(node: dict[str, Any]) -> None:
        for prop in node.get("properties", {}).values():
            for name in refs(prop):
                if name not in order:
                    order.append(name)
                    visit(schema["$defs"][name])

    visit(schema)
    return order


def _step_fields() -> list[str]:
    from rflow.lang.model import StepBase

    return [field.alias or name for name, field in StepBase.model_fields.items()]


def _model_section(name: str, node: dict[str, Any], skip: list[str]) -> str:
    text = f"### {name}\n\n"
    if node.get("description"):
        text += " ".join(node["description"].replace("``", "`").split()) + "\n\n"
    required = node.get("required", [])
    rows = [
        [_code(field), _type(prop), _default(field, prop, required), prop.get("description", "")]
        for field, prop in node.get("properties", {}).items()
        if field not in skip
    ]
    if skip:
        text += "Beside [the fields of every step](#fields-of-every-step):\n\n"
    return text + _table(["field", "type", "default", "what it does"], rows)


def render_sections() -> str:
    """The top-level sections of a workflow file (a project)."""
    schema = _schema()
    rows = [
        [_code(name), _type(prop), prop.get("description", "")]
        for name, prop in schema["properties"].items()
    ]
    return _table(["section", "type", "what it holds"], rows)


def render_models() -> str:
    """Every model of the workflow files and its fields, in the order they are met."""
    schema = _schema()
    common = _step_fields()
    parts: list[str] = []
    for name in _models(schema):
        node = schema["$defs"][name]
        is_step = name.endswith("Step") and set(common) <= set(node.get("properties", {}))
        if is_step and not any(p.startswith("### Fields of every step") for p in parts):
            every = {**node, "description": "The fields a step has whatever its action."}
            every["properties"] = {k: v for k, v in node["properties"].items() if k in common}
            parts.append(_model_section("Fields of every step", every, []))
        parts.append(_model_section(name, node, common if is_step else []))
    return "\n".join(parts)


def render_model(name: str) -> str:
    """One model of the workflow files (``<!-- generated: model:LogArgs -->``)."""
    schema = _schema()
    return _model_section(name, schema["$defs"][name], []).split("\n", 2)[2]


# --- expressions --------------------------------------------------------------------


def _arity(function: Any) -> str:
    if function.max_args is None:
        return f"{function.min_args} or more"
    if function.min_args == function.max_args:
        return str(function.min_args)
    return f"{function.min_args} to {function.max_args}"


def render_functions() -> str:
    """Every expression function: its arguments, what it does, and examples."""
    from rflow.expr import FUNCTIONS

    rows = [
        [
            _code(name),
            _arity(function),
            function.summary,
            "<br>".join(f"`{call}` → `{result}`" for call, result in function.examples),
        ]
        for name, function in sorted(FUNCTIONS.items())
    ]
    return _table(["function", "arguments", "what it does", "examples"], rows)


# --- failures -----------------------------------------------------------------------


def render_failures() -> str:
    """Every failure kind, what it means, and whether a step's ``retry`` retries it."""
    from rflow.docstrings import attribute_docstrings
    from rflow.failures import RETRYABLE, FailureKind

    docs = attribute_docstrings(FailureKind)
    # rflow.engine.retry.decide: timeout is retried only when the policy asks for it.
    asked = {FailureKind.TIMEOUT: "with `retry_on_timeout`"}
    rows = [
        [
            _code(kind.value),
            "yes" if kind in RETRYABLE else asked.get(kind, "no"),
            docs.get(kind.name, ""),
        ]
        for kind in FailureKind
    ]
    return _table(["kind", "`retry` retries it", "what happened"], rows)


# --- metrics and settings ----------------------------------------------------------


def render_metrics() -> str:
    """Every metric a worker serves at ``/metrics``."""
    from rflow.streams.metrics import Metrics

    rows = [
        [_code(spec.name), spec.type, ", ".join(spec.labels) or "-", spec.help]
        for spec in Metrics().specs
    ]
    return _table(["metric", "type", "labels", "what it counts"], rows)


def _constants(path: Path) -> Iterator[tuple[str, str, str | None]]:
    """The module-level constants of ``path`` whose value is a literal: each name, its
    value as written, and the docstring under it (``None`` without one). Read from the
    source, so the module (and what it imports) is not loaded."""
    import ast

    source = path.read_text()
    body = ast.parse(source).body
    for statement, following in zip(body, [*body[1:], None], strict=True):
        target = statement.target if isinstance(statement, ast.AnnAssign) else None
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
        if not isinstance(target, ast.Name) or statement.value is None:
            continue
        if not target.id.isupper() or target.id.startswith("_"):
            continue
        try:
            ast.literal_eval(statement.value)
        except ValueError:
            continue  # computed (a table of checks, say): not a figure to tune
        doc = None
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            doc = following.value.value
        yield target.id, ast.get_source_segment(source, statement.value) or "", doc


CONSUMPTION = ROOT / "streams" / "consumption.py"
"""The consumption layer: how every agent reads its topics (its figures are fixed)."""


def render_consumption() -> str:
    """The consumption layer's fixed figures, which no variable changes."""
    rows = [
        [_code(name), _code(value), inspect.cleandoc(doc or "")]
        for name, value, doc in _constants(CONSUMPTION)
    ]
    return _table(["constant", "value", "what it is"], rows)


def _setting_default(field: Any) -> str:
    from pydantic import SecretStr

    default = field.get_default(call_default_factory=True)
    if default is None or default == "":
        return "-"
    if isinstance(default, SecretStr):
        default = default.get_secret_value()
    if isinstance(default, dict):
        return ", ".join(f"{key}: {_code(value)}" for key, value in default.items())
    if isinstance(default, Path):
        default = str(default.relative_to(ROOT)) if default.is_relative_to(ROOT) else str(default)
    return _code(str(default))


def render_settings() -> str:
    """Every environment variable :class:`rflow.settings.Settings` reads."""
    from rflow.settings import Settings

    rows = [
        [
            _code(variable),
            _setting_default(Settings.model_fields[field]),
            Settings.model_fields[field].description or "",
        ]
        if not variable.endswith("_FILE") or variable.removesuffix("_FILE") not in variables
        else [
            _code(variable),
            "-",
            f"a file holding the value of `{variable.removesuffix('_FILE')}` instead (a "
            "mounted secret; read at start, without its trailing newline)",
        ]
        for variables in [Settings.variables()]
        for variable, field in variables.items()
    ]
    return _table(["variable", "default", "what it sets"], rows)


# --- who may do what ---------------------------------------------------------------


def render_actions() -> str:
    """Every action of :data:`rflow.authz.ACTIONS`: the roles that may take it, what it
    allows, and whether taking it is written to the audit trail."""
    from rflow.authz import ACTIONS, ROLES, roles_allowed

    shown = [role for role in ROLES if role != "none"]
    rows = [
        [
            _code(action.name),
            *("yes" if role in roles_allowed(action.name) else "-" for role in shown),
            action.what,
            "yes" if action.audited else "refusals only",
        ]
        for action in ACTIONS.values()
    ]
    return _table(["action", *shown, "what it allows", "audit trail"], rows)


def render_api_actions() -> str:
    """Each route of the HTTP API and the action it needs."""
    from rflow.streams.api import ROUTES

    rows = [
        [f"`{method} {path}`", _code(action)]
        for path, methods in ROUTES.items()
        for method, action in methods.items()
    ]
    return _table(["route", "action"], rows)


_CONSOLE_NEEDS = re.compile(
    r'console\.route\(\s*"(?P<path>/[^"]*)",(?P<rest>(?:(?!console\.route).)*?)'
    r'needs="(?P<action>[^"]+)"',
    re.S,
)


def console_actions() -> list[tuple[str, str, str]]:
    """Each console page or form: its path, GET or POST, and the action it needs (read
    from the source of ``rflow/console/``)."""
    from rflow.console.auth import PREFIX

    found = []
    for path in sorted((ROOT / "rflow" / "console").glob("*.py")):
        for match in _CONSOLE_NEEDS.finditer(path.read_text()):
            method = "POST" if "post=" in match["rest"] else "GET"
            found.append((PREFIX + match["path"], method, match["action"]))
    return sorted(found)


def render_console_actions() -> str:
    """Each console page and form, and the action it needs."""
    rows = [[f"`{method} {path}`", _code(action)] for path, method, action in console_actions()]
    return _table(["page or form", "action"], rows)


def render_cli_actions() -> str:
    """Each command of the CLI and the action it needs."""
    from rflow.cli.common import INFRASTRUCTURE

    rows = []
    for path, command in _commands():
        action = getattr(command.callback, "rflow_action", None)
        if action is not None:
            rows.append([f"`{path}`", _code(action)])
        elif path in INFRASTRUCTURE:
            rows.append([f"`{path}`", "none (local files, or the services' own credentials)"])
    return _table(["command", "action"], rows)


def render_kafka_acls() -> str:
    """The ACLs of rflow's principal and of an outside producer, with the commands that
    grant them (for the default topic prefix and app id)."""
    from rflow.settings import Settings
    from rflow.streams import kafka

    settings = Settings.from_env({})
    grants = [("User:rflow", acl) for acl in kafka.worker_acls(settings)]
    grants += [("User:orders", acl) for acl in kafka.producer_acls(settings)]
    rows = [
        [
            _code(who),
            acl.resource,
            _code(acl.name) + (" (prefixed)" if acl.pattern == "prefixed" else ""),
            ", ".join(acl.operations),
            acl.why,
        ]
        for who, acl in grants
    ]
    table = _table(["principal", "resource", "name", "operations", "why"], rows)
    commands = "\n".join(acl.command(who, "BROKERS", "admin.properties") for who, acl in grants)
    return f"{table.rstrip()}\n\n```sh\n{commands}\n```"


# --- the CLI ------------------------------------------------------------------------


def _commands() -> Iterator[tuple[str, Any]]:
    import click

    from rflow.cli import commands, main  # noqa: F401  (commands attaches every one)

    def walk(prefix: str, group: click.Group) -> Iterator[tuple[str, Any]]:
        for name in sorted(group.commands):
            command = group.commands[name]
            if isinstance(command, click.Group):
                yield from walk(f"{prefix} {name}", command)
            else:
                yield f"{prefix} {name}", command

    yield from walk("rflow", main)


def _help(command: Any) -> str:
    text = inspect.cleandoc(command.help or "").replace("\b\n", "")
    return "\n\n".join(" ".join(p.split()) for p in text.split("\n\n") if p.strip())


def render_cli() -> str:
    """Every command: its usage, what it does, and its options."""
    import click

    parts = []
    for path, command in _commands():
        ctx = click.Context(command, info_name=path)
        usage = " ".join([path, *command.collect_usage_pieces(ctx)])
        text = f"### `{path}`\n\n```\n{usage}\n```\n\n{_help(command)}\n"
        action = getattr(command.callback, "rflow_action", None)
        if action is not None:
            text += f"\nNeeds the action `{action}` ([who may](principals.md#actions-by-role)).\n"
        rows = []
        for param in command.params:
            if not isinstance(param, click.Option) or param.hidden:
                continue
            names = ", ".join(param.opts + param.secondary_opts)
            metavar = "" if param.is_flag else " " + param.make_metavar(ctx)
            default = (
                f" (default: {param.default})"
                if param.show_default and param.default is not None
                else ""
            )
            said = param.help or ("Print the answer as JSON." if names == "--json" else "")
            if names == "--project" and getattr(command.callback, "rflow_action", None):
                said += (
                    " Before anything is deployed, the principals the CLI's token is looked up in."
                )
            rows.append([f"`{names}{metavar}`", said + default])
        if rows:
            text += "\n" + _table(["option", "what it does"], rows)
        parts.append(text)
    return "\n".join(parts)


# --- the blocks, and what is missing -----------------------------------------------

RENDERERS: dict[str, Callable[[], str]] = {
    "sections": render_sections,
    "models": render_models,
    "functions": render_functions,
    "failures": render_failures,
    "metrics": render_metrics,
    "settings": render_settings,
    "cli": render_cli,
    "actions": render_actions,
    "api-actions": render_api_actions,
    "console-actions": render_console_actions,
    "cli-actions": render_cli_actions,
    "consumption": render_consumption,
    "kafka-acls": render_kafka_acls,
}
"""Block name -> what renders it; ``model:NAME`` renders one model."""


def render(name: str) -> str:
    """The text of block ``name``."""
    if name.startswith("model:"):
        return render_model(name.split(":", 1)[1])
    try:
        return RENDERERS[name]()
    except KeyError:
        raise KeyError(f"no generated block named {name!r}") from None


def rewrite(text: str) -> str:
    """``text`` with every generated block rendered anew."""
    cache: dict[str, str] = {}

    def block(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in cache:
            cache[name] = render(name)
        return match.group(1) + "\n" + cache[name] + "\n" + match.group(4)

    return _BLOCK.sub(block, text)


def pages() -> list[Path]:
    """The pages of the reference."""
    return sorted(DOCS.glob("*.md"))


def gaps() -> list[str]:
    """Everything the reference cannot describe because the code does not: each a
    sentence saying what is missing and where to write it."""
    return [
        *_schema_gaps(),
        *_function_gaps(),
        *_failure_gaps(),
        *_metric_gaps(),
        *_setting_gaps(),
        *_consumption_gaps(),
        *_cli_gaps(),
        *_page_gaps(),
    ]


def _schema_gaps() -> Iterator[str]:
    schema = _schema()
    models = {"Project": schema, **schema["$defs"]}
    for name, node in models.items():
        if not node.get("description"):
            yield f"workflow files: model {name} has no description: give its class a docstring"
        for field, prop in node.get("properties", {}).items():
            if not prop.get("description"):
                yield (
                    f"workflow files: {name}.{field} has no description: write a docstring "
                    f"under the field {field!r} of class {name}"
                )


def _function_gaps() -> Iterator[str]:
    from rflow.expr import FUNCTIONS, evaluate, parse
    from rflow.expr.jsontext import dumps
    from rflow.expr.limits import Budget

    for name, function in sorted(FUNCTIONS.items()):
        if not function.examples:
            yield (
                f"expressions: function {name}() has no example: add '>>> {name}(...)' and "
                "the result on the next line to its docstring (rflow/expr/functions.py)"
            )
        for call, result in function.examples:
            try:
                got = dumps(evaluate(parse(call), {}), Budget())
                want = dumps(evaluate(parse(result), {}), Budget())
            except Exception as exc:
                yield f"expressions: the example {call} of {name}() does not evaluate: {exc}"
                continue
            if got != want:
                yield f"expressions: the example {call} of {name}() gives {got}, not {result}"


def _failure_gaps() -> Iterator[str]:
    from rflow.docstrings import attribute_docstrings
    from rflow.failures import FailureKind

    documented = attribute_docstrings(FailureKind)
    for kind in FailureKind:
        if kind.name not in documented:
            yield (
                f"failures: kind {kind.value} has no description: write a docstring under "
                f"FailureKind.{kind.name} (rflow/failures.py)"
            )


def _metric_gaps() -> Iterator[str]:
    from rflow.streams.metrics import ExactGauge, Metrics

    metrics = Metrics()
    listed = {spec.name.removesuffix("_total") for spec in metrics.specs}
    served = [family.name for family in metrics.registry.collect()]
    served += [value.name for value in vars(metrics).values() if isinstance(value, ExactGauge)]
    for name in served:
        if name not in listed:
            yield (
                f"metrics: {name} is not in Metrics.specs: declare it with "
                "Metrics._counter, _gauge, _histogram or _exact (streams/metrics.py)"
            )
    for spec in metrics.specs:
        if not spec.help.strip():
            yield f"metrics: {spec.name} has no help text (streams/metrics.py)"


def _setting_gaps() -> Iterator[str]:
    from rflow.settings import Settings

    variables = set(Settings.variables().values())
    for name, field in Settings.model_fields.items():
        if not field.description:
            yield f"settings: Settings.{name} has no description (rflow/settings.py)"
        if name not in variables:
            yield f"settings: Settings.{name} is read from no variable (rflow/settings.py)"


def _consumption_gaps() -> Iterator[str]:
    for name, _value, doc in _constants(CONSUMPTION):
        if not (doc or "").strip():
            yield (
                f"consumption: {name} has no description: write a docstring under it "
                "(streams/consumption.py)"
            )


_CONSOLE_ROUTE = re.compile(
    r'(?:console\.route\(|app\.page\(auth\.PREFIX \+ )\s*"(?P<path>/[^"]*)"'
)


def console_paths() -> list[str]:
    """Every path the console serves (its pages, forms, sign-in and static files), read
    from the source of ``rflow/console/`` so that nothing is started."""
    from rflow.console.auth import PREFIX

    found = {PREFIX + "/"}
    for path in sorted((ROOT / "rflow" / "console").glob("*.py")):
        found.update(PREFIX + m["path"] for m in _CONSOLE_ROUTE.finditer(path.read_text()))
    return sorted(found)


def _cli_gaps() -> Iterator[str]:
    from rflow.cli.common import INFRASTRUCTURE

    for path, command in _commands():
        if not _help(command):
            yield f"cli: {path} has no help: give its function a docstring"
        if getattr(command.callback, "rflow_action", None) is None and path not in INFRASTRUCTURE:
            yield (
                f"cli: {path} names no action: decorate it with @needs(...) "
                "(rflow/cli/common.py), or list it in INFRASTRUCTURE"
            )
    routed = {path for path, _, _ in console_actions()}
    for path in console_paths():
        if path not in routed and not path.endswith(
            ("/", "/sign-in", "/sign-out", "/static/{name}")
        ):
            yield f"console: {path} names no action: give console.route(...) needs=..."


def _page_gaps() -> Iterator[str]:
    """What the hand-written parts must name because the code defines it."""
    import typing

    from rflow.expr import ROOTS
    from rflow.expr.nodes import BinaryOp, UnaryOp
    from rflow.lang.model.actions import COMMANDS
    from rflow.lang.references import ERROR_FIELDS, RUN_FIELDS, STEP_FIELDS

    def page(name: str) -> str:
        path = DOCS / name
        return path.read_text() if path.exists() else ""

    expressions = page("expressions.md")
    wanted = {
        "root name": sorted(ROOTS),
        "operator": [*typing.get_args(BinaryOp), *typing.get_args(UnaryOp)],
        "field of run": RUN_FIELDS,
        "field of steps.<id>": STEP_FIELDS,
        "field of error": ERROR_FIELDS,
    }
    for what, names in wanted.items():
        for name in names:
            if f"`{name}`" not in expressions:
                yield f"docs/expressions.md: the {what} `{name}` is not described"
    commands = page("commands.md")
    for name in COMMANDS:
        if f"## `{name}`" not in commands:
            yield f"docs/commands.md: the built-in command {name} has no section (## `{name}`)"
    settings = page("settings.md")
    for variable in sorted(_variables_read()):
        if variable not in settings:
            yield f"docs/settings.md: {variable} is read but not described"
    console = page("console.md")
    for path in console_paths():
        if f"`{path}`" not in console:
            yield f"docs/console.md: the console's path `{path}` is not described"
    if "docs/README.md" not in (ROOT / "README.md").read_text():
        yield "README.md does not link the reference (docs/README.md)"


_VARIABLE = re.compile(r"\bRFLOW_[A-Z][A-Z0-9_]*")


def _variables_read() -> set[str]:
    """Every ``RFLOW_*`` name in the code and the scripts (``RFLOW_RPC_URL_`` is one
    variable per network)."""
    files = [
        *ROOT.glob("rflow/**/*.py"),
        *(
            path
            for package in ("agents", "streams", "storage", "codecs")
            for path in ROOT.glob(f"{package}/**/*.py")
        ),
        *(path for path in (ROOT / "scripts").iterdir() if path.is_file()),
        *ROOT.glob("tests/chaos/*.py"),
        ROOT / ".ci" / "run",
    ]
    found: set[str] = set()
    for path in files:
        if path.exists():
            found.update(_VARIABLE.findall(path.read_text(errors="replace")))
    found = {"RFLOW_RPC_URL_<NETWORK>" if v == "RFLOW_RPC_URL_" else v for v in found}
    found.discard("RFLOW_")
    return found


def main(argv: list[str] | None = None) -> int:
    """``scripts/docs [--check]``: rewrite the generated blocks and the committed JSON
    Schema (or only compare), then list what is undocumented; exit 1 when anything is
    out of date or missing."""
    import argparse

    parser = argparse.ArgumentParser(description="Render the generated parts of docs/.")
    parser.add_argument("--check", action="store_true", help="compare only; write nothing")
    args = parser.parse_args(argv)
    from rflow.lang.schema import schema_text

    stale = []
    renderings = [(path, rewrite) for path in pages()]
    renderings.append((ROOT / "schemas" / "rflow.schema.json", lambda _text: schema_text()))
    for path, render_page in renderings:
        text = path.read_text()
        fresh = render_page(text)
        if fresh != text:
            stale.append(path)
            if not args.check:
                path.write_text(fresh)
    verb = "out of date" if args.check else "rewritten"
    for path in stale:
        print(f"{path.relative_to(ROOT)}: {verb}")
    missing = gaps()
    for gap in missing:
        print(f"undocumented: {gap}")
    return 1 if missing or (stale and args.check) else 0


if __name__ == "__main__":
    raise SystemExit(main())

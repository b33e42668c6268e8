"""Rules about step ids, jumps and expressions (and amounts written without a unit),
checked on the loaded data.

These rules work on the plain data rather than the validated model so that they still
run, and still report, when some other part of a workflow failed validation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from rflow.expr import Expr, ExpressionError, Name, parse_template
from rflow.expr.references import static_path
from rflow.lang.deferred import EFFECT_INPUTS, NESTED_LISTS, effect_input
from rflow.lang.diagnostics import DataPath, Diagnostic, format_path
from rflow.lang.messages import did_you_mean
from rflow.lang.model.steps import ACTIONS, StepBase
from rflow.lang.yamlsrc import SourceMap

STEP_FIELDS = ("output", "status", "tx", "error", "branches", "winner")
"""What ``steps.<id>`` offers (``branches`` for a parallel or race, ``winner`` for a race)."""

RUN_FIELDS = ("id", "workflow", "version", "trigger_key", "status")
"""What ``run`` offers (built by :func:`rflow.engine.context.run_context`)."""

ERROR_FIELDS = ("kind", "message", "retry_after", "non_retryable")
"""What ``error`` offers: the failure's kind and its message, the seconds the service
asked to wait (``Retry-After``, else null) and whether a status outside
``retryable_status_codes`` made it never retried."""

_BLOCKS = ("steps", "finally", "on_error")
_KNOWN_STEP_KEYS = frozenset([*ACTIONS, *(f.alias or n for n, f in StepBase.model_fields.items())])
_STEP_ROOTS = frozenset({"trigger", "steps", "run", "state", "env", "inputs", "wait"})
_WAIT_URL_KINDS = ("http_call", "notify", "command")
"""The steps that can hand ``${{ wait.url }}`` on (their executors fill it in)."""
_WHY = {
    "item": "item is only defined inside a foreach step",
    "item_index": "item_index is only defined inside a foreach step",
    "matrix": "matrix is only defined when the workflow has strategy.matrix",
    "error": "error is only defined in retry.retry_if, and in catch, compensate, on_error "
    "and finally steps",
    "steps": "steps are not available here: this is evaluated before the run starts",
    "run": "run is not available here: this is evaluated before the run starts",
    "state": "state is not available here",
    "wait": "wait is only defined in steps (wait.url: the resume URL of the webhook wait "
    "after the step)",
}
_ENV_BEFORE_RUN = (
    "env values are filled in only when a step's effect runs, so this cannot read them; "
    "use ${VAR}, substituted when the file loads"
)


_ROLES = {"parallel": "branch", "race": "branch", "try": "try", "catch": "catch"}
"""The role of the steps under each list key of a block (``compensate`` is its own)."""


@dataclass
class _StepInfo:
    block: str
    """The workflow's list it sits in, at whatever depth: steps, finally or on_error."""
    index: int
    kind: str | None
    path: DataPath = ()
    """Where the step is, from the workflow (``('steps', 2, 'try', 0)``)."""
    role: str = "main"
    """main, finally, on_error (a workflow's lists), branch, try, catch or compensate."""
    owner: str | None = None
    """The step whose list holds it (a block, or the step a compensation undoes)."""
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def list_path(self) -> DataPath:
        """The list the step sits in."""
        return self.path[:-1]

    @property
    def where(self) -> str:
        return format_path(self.path)


@dataclass
class _Context:
    """What an expression at some place may read."""

    roots: frozenset[str]
    earlier: frozenset[str] = frozenset()
    current: str | None = None
    why: dict[str, str] = field(default_factory=dict)
    step: dict[str, Any] | None = None
    """The raw step the expression is in, and its path from the workflow."""
    step_path: DataPath = ()


class ReferenceChecker:
    """Checks one workflow's ids, jumps and expressions; collects diagnostics."""

    def __init__(
        self,
        name: str,
        workflow: Mapping[str, Any],
        source: SourceMap,
        event_args: Sequence[str] | None = None,
    ) -> None:
        self.base: DataPath = ("workflows", name)
        self.workflow = workflow
        self.source = source
        self.event_args = event_args
        self.diagnostics: list[Diagnostic] = []
        strategy = workflow.get("strategy")
        matrix = strategy.get("matrix") if isinstance(strategy, dict) else None
        self.matrix_keys = frozenset(matrix) if isinstance(matrix, dict) else None
        env = workflow.get("env")
        self.env_names = (
            frozenset(n for n in env if isinstance(n, str))
            if isinstance(env, list)
            else frozenset()
        )
        self.inputs = _manual_inputs(workflow)
        self.steps: dict[str, _StepInfo] = {}
        self._parsed: dict[str, Any] = {}

    def _error(self, path: DataPath, message: str, offset: int = -1) -> None:
        location = self.source.at_offset(path, offset) if offset >= 0 else self.source.value(path)
        self.diagnostics.append(Diagnostic.at(location, message, path))

    # --- ids and jumps -------------------------------------------------------------

    def _blocks(self) -> Iterator[tuple[str, int, dict[str, Any]]]:
        for block in _BLOCKS:
            items = self.workflow.get(block)
            if isinstance(items, list):
                for index, step in enumerate(items):
                    if isinstance(step, dict):
                        yield block, index, step

    def _places(self) -> Iterator[_StepInfo]:
        """Every raw step, at any depth, with where it sits (its id may be missing)."""
        stack: list[_StepInfo] = []
        for block, index, step in reversed(list(self._blocks())):
            stack.append(_StepInfo(block, index, _kind(step), (block, index), block, None, step))
        while stack:
            place = stack.pop()
            yield place
            owner = place.raw.get("id") if isinstance(place.raw.get("id"), str) else None
            inner = []
            for key in NESTED_LISTS:
                items = place.raw.get(key)
                if not isinstance(items, list):
                    continue
                if key in _ROLES and place.kind != (key if key != "catch" else "try"):
                    continue  # the model says what is wrong with the step
                role = _ROLES.get(key, key)
                for index, step in enumerate(items):
                    if isinstance(step, dict):
                        path = (*place.path, key, index)
                        inner.append(
                            _StepInfo(place.block, index, _kind(step), path, role, owner, step)
                        )
            stack.extend(reversed(inner))

    def _collect_ids(self) -> None:
        for place in self._places():
            step_id = place.raw.get("id")
            if not isinstance(step_id, str):
                continue
            first = self.steps.get(step_id)
            if first is not None:
                self._error(
                    (*self.base, *place.path, "id"),
                    f"duplicate step id {step_id!r} (already used by {first.where})"
                    + (
                        ": every step id is unique in its workflow, inside blocks too"
                        if len(place.path) > 2 or len(first.path) > 2
                        else ""
                    ),
                )
                continue
            self.steps[step_id] = place

    def _check_jump(self, path: DataPath, target: Any, place: _StepInfo) -> None:
        if not isinstance(target, str):
            return
        info = self.steps.get(target)
        if info is None:
            same = [i for i, s in self.steps.items() if s.list_path == place.list_path]
            self._error(path, f"goto to unknown step {target!r}{did_you_mean(target, same)}")
        elif info.list_path != place.list_path:
            self._error(path, self._crossing(target, info, place))

    def _crossing(self, target: str, info: _StepInfo, place: _StepInfo) -> str:
        """Why a jump from ``place`` to ``info`` leaves its list."""
        mine, theirs = place.list_path, info.list_path
        if len(mine) == 1 and len(theirs) == 1:
            return (
                f"goto {target!r} leaves {place.block}: a jump stays within its own list "
                f"({target!r} is in {info.block})"
            )
        common = 0
        while common < min(len(mine), len(theirs)) and mine[common] == theirs[common]:
            common += 1
        verb = "into" if theirs[: len(mine)] == mine else "out of"
        deeper = theirs if verb == "into" else mine
        # The first block the jump crosses: the step where the two lists part (or whose
        # lists they are, when they part at a list's key).
        owner_path = deeper[: common + 1] if isinstance(deeper[common], int) else deeper[:common]
        owner = next((s for s in self.steps.values() if s.path == owner_path), None)
        block = f"{owner.kind} block {owner.raw.get('id')!r}" if owner is not None else "a block"
        return (
            f"goto {target!r} jumps {verb} the {block}: a goto may not jump into or out "
            f"of a parallel, race or try block, nor between a block's lists "
            f"({target!r} is at {info.where})"
        )

    def _check_jumps(self) -> None:
        for place in self._places():
            step = place.raw
            path = (*self.base, *place.path)
            choose = step.get("choose")
            if isinstance(choose, dict):
                if "foreach" in step:
                    self._error(
                        (*path, "foreach"), "choose cannot run per item: a jump moves the whole run"
                    )
                if place.role == "branch":
                    self._error(
                        (*path, "choose"),
                        "a choose cannot be a branch of a parallel or race: branches run side "
                        "by side, so a jump has nowhere to go (put a try block in the branch)",
                    )
                    continue
                branches = choose.get("branches")
                for b, branch in enumerate(branches if isinstance(branches, list) else []):
                    if isinstance(branch, dict):
                        self._check_jump(
                            (*path, "choose", "branches", b, "goto"), branch.get("goto"), place
                        )
                default = choose.get("default")
                if isinstance(default, dict):
                    self._check_jump(
                        (*path, "choose", "default", "goto"), default.get("goto"), place
                    )
            wait = step.get("wait_for")
            if not isinstance(wait, dict):
                continue
            on_timeout = wait.get("on_timeout")
            jumps = [(("on_timeout",), on_timeout), (("on_reject",), wait.get("on_reject"))]
            escalate = on_timeout.get("escalate") if isinstance(on_timeout, dict) else None
            if isinstance(escalate, dict):
                jumps.append((("on_timeout", "escalate", "then"), escalate.get("then")))
            for field_path, jump in jumps:
                if isinstance(jump, dict) and "goto" in jump:
                    self._check_wait_jump(place, (*path, "wait_for", *field_path), jump)

    def _check_wait_jump(self, place: _StepInfo, where: DataPath, jump: dict[str, Any]) -> None:
        name = ".".join(str(part) for part in where[len(self.base) + len(place.path) + 1 :])
        if place.block == "finally":
            self._error(
                where,
                f"{name}: goto is not allowed in a finally step (the run has settled); use fail or continue",
            )
        elif "foreach" in place.raw:
            self._error(
                where,
                f"{name}: goto is not allowed inside foreach (each item waits on its own); use fail or continue",
            )
        elif place.role == "branch":
            self._error(
                where,
                f"{name}: goto is not allowed in a branch of a parallel or race (branches run "
                "side by side); use fail or continue",
            )
        else:
            self._check_jump((*where, "goto"), jump.get("goto"), place)

    # --- where blocks, compensations and hooks may be --------------------------------

    def _check_structure(self) -> None:
        for place in self._places():
            step = place.raw
            path = (*self.base, *place.path)
            if "compensate" in step and self._scope(place) is None:
                self._error(
                    (*path, "compensate"),
                    "compensate applies to a step inside a try block (its compensation runs "
                    "when a later step of the block fails): put this step in a try:"
                    + (
                        " (a compensation is not compensated itself)"
                        if place.role == "compensate"
                        else ""
                    ),
                )
            if place.block == "on_error" and place.role == "on_error":
                for key, why in (
                    ("retry", "on_error steps are observational and never retried"),
                    ("compensate", "on_error steps are never compensated"),
                ):
                    if key in step:
                        self._error((*path, key), f"{why}: remove {key}")
                kind = place.kind
                if kind in ("parallel", "race", "try", "call_workflow", "choose", "wait_for"):
                    self._error(
                        (*path, kind),
                        f"an on_error step reports a failure: a {kind} step cannot be one (use "
                        "notify, http_call, command or a state change)",
                    )

    def _scope(self, place: _StepInfo) -> str | None:
        """The try block whose compensations ``place`` joins: the nearest enclosing try
        that holds it in its try list (through branches, and catch lists of inner tries)."""
        while place.owner is not None:
            owner = self.steps.get(place.owner)
            if owner is None or place.role == "compensate":
                return None
            if place.role == "try":
                return place.owner
            place = owner
        return None

    # --- expressions ---------------------------------------------------------------

    def _readable(self, place: _StepInfo) -> set[str]:
        """The steps that have run whenever ``place`` runs (with every step inside them)."""
        earlier: set[str] = set()
        siblings = [s for s in self.steps.values() if s.list_path == place.list_path]
        for other in siblings:
            if other.index < place.index and place.role not in ("branch",):
                earlier |= self._within(other)
        if place.role in ("main",):
            return earlier
        if place.role in ("finally", "on_error"):
            earlier |= {i for i, s in self.steps.items() if s.block == "steps"}
            if place.role == "finally":
                earlier |= {i for i, s in self.steps.items() if s.block == "on_error"}
            return earlier
        owner = self.steps.get(place.owner or "")
        if owner is None:
            return earlier
        earlier |= self._readable(owner)
        if place.role == "catch":
            # Its try block's own record too: steps.<try>.error is the failure caught.
            earlier |= {i for i in self._within(owner) if self.steps[i].role != "catch"}
        elif place.role == "compensate":
            earlier |= self._within(owner) - self._within_list(owner, "compensate")
            scope = self._scope(owner)
            if scope is not None:
                earlier.add(scope)
        return earlier

    def _within(self, place: _StepInfo) -> set[str]:
        """``place``'s id and the ids of every step inside it."""
        found = {place.raw["id"]} if isinstance(place.raw.get("id"), str) else set()
        depth = len(place.path)
        found |= {i for i, s in self.steps.items() if s.path[:depth] == place.path}
        return found

    def _within_list(self, place: _StepInfo, key: str) -> set[str]:
        prefix = (*place.path, key)
        return {i for i, s in self.steps.items() if s.path[: len(prefix)] == prefix}

    def _step_context(self, place: _StepInfo, part: str) -> _Context:
        step = place.raw
        roots = set(_STEP_ROOTS)
        why: dict[str, str] = {}
        if self.matrix_keys is not None:
            roots.add("matrix")
        if "foreach" in step:
            if part == "foreach":
                why["item"] = why["item_index"] = "the foreach list cannot use item: it defines it"
            else:
                roots |= {"item", "item_index"}
        if (
            place.block in ("finally", "on_error")
            or part == "retry_if"
            or self._after_failure(place)
        ):
            roots.add("error")
        step_id = step.get("id")
        return _Context(
            frozenset(roots),
            frozenset(self._readable(place)),
            step_id if isinstance(step_id, str) else None,
            why,
            step,
            place.path,
        )

    def _after_failure(self, place: _StepInfo) -> bool:
        """Whether ``place`` runs because something failed: in a catch or a compensation."""
        while place.owner is not None:
            if place.role in ("catch", "compensate"):
                return True
            owner = self.steps.get(place.owner)
            if owner is None:
                return False
            place = owner
        return False

    def _check_expressions(self) -> None:
        for place in self._places():
            step = place.raw
            path = (*self.base, *place.path)
            for key, value in step.items():
                if key == "id" or key not in _KNOWN_STEP_KEYS or key in NESTED_LISTS:
                    continue  # an unknown field is reported by the model; inner steps below
                if key == "retry" and isinstance(value, dict):
                    for sub, inner in value.items():
                        part = "retry_if" if sub == "retry_if" else "retry"
                        self._check_strings(
                            (*path, key, sub), inner, self._step_context(place, part)
                        )
                    continue
                self._check_strings((*path, key), value, self._step_context(place, key))
            self._check_context_fields(path, step, self._step_context(place, ""))
        workflow_level = _Context(frozenset(), why={"env": _ENV_BEFORE_RUN})
        for key, value in self.workflow.items():
            path = (*self.base, key)
            if key in _BLOCKS or key == "description":
                continue
            if key == "concurrency":
                roots = {"trigger", "inputs"} | (
                    {"matrix"} if self.matrix_keys is not None else set()
                )
                why = {"env": _ENV_BEFORE_RUN}
                self._check_strings(path, value, _Context(frozenset(roots), why=why))
            elif key in ("trigger", "triggers"):
                self._check_strings(path, value, workflow_level)
            elif key == "outputs":
                roots = set(_STEP_ROOTS) - {"env"} | (
                    {"matrix"} if self.matrix_keys is not None else set()
                )
                every = frozenset(i for i, s in self.steps.items() if s.block == "steps")
                why = {"env": "outputs are stored with the run: env values never are"}
                self._check_strings(path, value, _Context(frozenset(roots), every, why=why))
            else:
                for where, _ in _strings(path, value):
                    self._error(where, f"expressions are not evaluated in {key}")

    def _check_strings(self, path: DataPath, value: Any, context: _Context) -> None:
        for where, text in _strings(path, value):
            try:
                template = self._parsed.get(text) or parse_template(text)
            except ExpressionError as exc:
                self._error(where, f"expression does not parse: {exc.message}", exc.offset)
                continue
            self._parsed[text] = template
            if _wants_one_value(where[len(self.base) + len(context.step_path) :]) and (
                context.step is not None and not template.is_single_expression
            ):
                self._error(
                    where,
                    "write the whole value inside one ${{ ... }}: text around an expression "
                    "makes a string, and any non-empty string counts as true",
                )
            for segment in template.segments:
                if isinstance(segment, Expr):
                    for ref, offset in _references(segment):
                        message = (
                            self._check_reference(ref, context)
                            or self._check_env(where, segment, ref, context)
                            or self._check_wait(where, segment, ref, context)
                        )
                        if message:
                            self._error(where, message, offset)

    def _check_context_fields(
        self, path: DataPath, step: dict[str, Any], context: _Context
    ) -> None:
        """A list of ``context_fields`` names references without ``${{ }}``: each is read
        as the expression it stands for."""
        wait = step.get("wait_for")
        approval = wait.get("approval") if isinstance(wait, dict) else None
        fields = approval.get("context_fields") if isinstance(approval, dict) else None
        if not isinstance(fields, list):
            return
        for i, entry in enumerate(fields):
            if not isinstance(entry, str) or "${{" in entry:
                continue  # the model says what is wrong with it
            where = (*path, "wait_for", "approval", "context_fields", i)
            try:
                template = parse_template("${{ " + entry + " }}")
            except ExpressionError:
                continue  # not a reference: the model reports it
            for segment in template.segments:
                if isinstance(segment, Expr):
                    for ref, offset in _references(segment):
                        message = self._check_reference(ref, context)
                        if message:
                            self._error(where, message, max(offset - 4, 0))

    def _check_reference(self, ref: tuple[str | int, ...], context: _Context) -> str | None:
        root = ref[0]
        if root not in context.roots:
            return context.why.get(root) or _WHY.get(root) or f"{root} is not available here"
        if root == "steps" and len(ref) > 1 and isinstance(ref[1], str):
            return self._check_step_reference(ref, context)
        if (
            root == "matrix"
            and len(ref) > 1
            and self.matrix_keys is not None
            and ref[1] not in self.matrix_keys
        ):
            return f"unknown matrix key {ref[1]!r}{did_you_mean(str(ref[1]), self.matrix_keys)}"
        if (
            root == "inputs"
            and len(ref) > 1
            and self.inputs is not None
            and ref[1] not in self.inputs
        ):
            declared = ", ".join(sorted(self.inputs)) or "none"
            hint = did_you_mean(str(ref[1]), self.inputs)
            return f"unknown input {ref[1]!r}{hint} (the manual trigger declares: {declared})"
        fixed = {"run": RUN_FIELDS, "error": ERROR_FIELDS}.get(str(root))
        if fixed is not None and len(ref) > 1 and isinstance(ref[1], str) and ref[1] not in fixed:
            return _no_field(str(root), ref[1], fixed)
        if root == "env" and len(ref) > 1 and ref[1] not in self.env_names:
            return f"env.{ref[1]} is not allow-listed: add {ref[1]} to the workflow's env list"
        if (
            root == "trigger"
            and self.event_args is not None
            and len(ref) > 2
            and ref[1] == "args"
            and isinstance(ref[2], str)
            and ref[2] not in self.event_args
        ):
            listed = ", ".join(self.event_args) or "none"
            return f"the trigger event has no argument {ref[2]!r}{did_you_mean(ref[2], self.event_args)} (it has: {listed})"
        return None

    def _check_env(
        self, where: DataPath, segment: Expr, ref: tuple[str | int, ...], context: _Context
    ) -> str | None:
        """``env.NAME`` in a step: only alone, and only in what the step hands its effect,
        which fills the value in; the engine sees the placeholder ``${NAME}``."""
        if ref[0] != "env" or "env" not in context.roots:
            return None
        name = ref[1] if len(ref) > 1 else "NAME"
        rest = where[len(self.base) + len(context.step_path) :]
        if context.step is None or not effect_input(context.step, rest):
            return (
                f"env.{name} cannot be read here: env values are filled in only when the "
                "step's effect runs (they never enter run state), so only what the step "
                f"hands to the effect can use them ({EFFECT_INPUTS})"
            )
        if len(ref) != 2 or static_path(segment) != ref:
            return (
                f"write env.{name} alone, as ${{{{ env.{name} }}}}: its value is filled in "
                "when the effect runs, so an expression cannot compute with it"
            )
        return None

    def _check_wait(
        self, where: DataPath, segment: Expr, ref: tuple[str | int, ...], context: _Context
    ) -> str | None:
        """``wait.url`` in a step: alone, handed to an http_call, a notify or a command,
        naming the webhook wait that comes after the step in its list (one without
        foreach, whose path is literal: the URL is made before the wait parks)."""
        if ref[0] != "wait" or "wait" not in context.roots:
            return None
        if len(ref) != 2 or ref[1] != "url" or static_path(segment) != ref:
            return (
                "write wait.url alone, as ${{ wait.url }} (wait offers url only): the URL "
                "carries the wait's token and is filled in when the effect runs"
            )
        block, index = where[2], where[3]
        step = self.workflow[block][index]
        kind = next((a for a in ACTIONS if a in step), None)
        if kind not in _WAIT_URL_KINDS or not effect_input(step, where[4:]):
            return (
                "wait.url can only be handed to an http_call (url, headers, body), a notify "
                "(message) or a command (args): it is filled in when their effect runs"
            )
        for later in self.workflow[block][index + 1 :]:
            wait = later.get("wait_for") if isinstance(later, dict) else None
            webhook = wait.get("webhook") if isinstance(wait, dict) else None
            if not isinstance(webhook, dict):
                continue
            if "foreach" in later:
                return (
                    f"wait.url names the webhook wait after this step, {later.get('id')!r}, "
                    "which runs per item (each item has a URL of its own): it cannot name one"
                )
            path = webhook.get("path")
            if isinstance(path, str) and "${{" in path:
                return (
                    f"wait.url names the webhook wait {later.get('id')!r}, whose path holds "
                    "an expression: give that wait a literal path (or none) so its URL is "
                    "known before it parks"
                )
            return None
        return (
            f"wait.url names the webhook wait that comes after this step in {block}, and "
            "there is none"
        )

    def _check_step_reference(self, ref: tuple[str | int, ...], context: _Context) -> str | None:
        target = str(ref[1])
        info = self.steps.get(target)
        if info is None:
            return f"reference to unknown step {target!r}{_unknown_step_hint(target, self.steps, context.earlier)}"
        if target == context.current:
            return f"a step cannot read its own result (steps.{target})"
        if target not in context.earlier:
            if info.role == "branch" and context.current in self._siblings(info):
                return (
                    f"steps.{target} is a branch beside this one: branches run side by side, "
                    "so one cannot read another's result"
                )
            return f"steps.{target} runs later ({info.where}): a step can only read steps that run before it"
        if len(ref) > 2 and isinstance(ref[2], str):
            attribute = ref[2]
            if attribute not in STEP_FIELDS:
                return f"steps.{target} has no {attribute!r}{did_you_mean(attribute, STEP_FIELDS)} (use output, status, tx or error)"
            if attribute == "tx" and info.kind not in (None, "send_transaction"):
                return f"steps.{target}.tx: only send_transaction steps have tx ({target} is a {info.kind} step)"
            if attribute == "winner" and info.kind not in (None, "race"):
                return f"steps.{target}.winner: only a race has a winner ({target} is a {info.kind} step)"
            if attribute == "branches" and info.kind not in (None, "parallel", "race"):
                return f"steps.{target}.branches: only a parallel or race has branches ({target} is a {info.kind} step)"
            branch = ref[3] if attribute == "branches" and len(ref) > 3 else None
            if isinstance(branch, str):
                names = [
                    i for i, s in self.steps.items() if s.owner == target and s.role == "branch"
                ]
                if branch not in names:
                    return (
                        f"steps.{target}.branches has no {branch!r}{did_you_mean(branch, names)} "
                        f"(its branches: {', '.join(names)})"
                    )
            field = ref[3] if attribute == "error" and len(ref) > 3 else None
            if isinstance(field, str) and field not in ERROR_FIELDS:
                return _no_field(f"steps.{target}.error", field, ERROR_FIELDS)
        return None

    def _siblings(self, place: _StepInfo) -> set[str]:
        return {i for i, s in self.steps.items() if s.list_path == place.list_path}

    def _check_bare_values(self) -> None:
        """A send's ``value`` written as a bare integer is wei: ``value: 1`` sends one wei,
        which is rarely what was meant. It is taken, with a warning that says so; a unit
        (``1 ether``, ``1 wei``) says which was meant."""
        for block, index, step in self._blocks():
            send = step.get("send_transaction")
            if not isinstance(send, dict):
                continue
            path = (*self.base, block, index, "send_transaction")
            found = [(("value",), send.get("value"))]
            calls = send.get("calls")
            for i, call in enumerate(calls if isinstance(calls, list) else []):
                if isinstance(call, dict):
                    found.append((("calls", i, "value"), call.get("value")))
            for where, value in found:
                if _bare_integer(value):
                    location = self.source.value((*path, *where))
                    self.diagnostics.append(
                        Diagnostic.at(location, _bare_wei(value), (*path, *where), "warning")
                    )

    def run(self) -> list[Diagnostic]:
        """Apply every rule; the diagnostics found."""
        self._collect_ids()
        self._check_jumps()
        self._check_structure()
        self._check_expressions()
        self._check_bare_values()
        return self.diagnostics


def _kind(step: Mapping[str, Any]) -> str | None:
    """The action a raw step holds (``None``: none, or several)."""
    found = [action for action in ACTIONS if action in step]
    return found[0] if len(found) == 1 else None


def _bare_integer(value: Any) -> bool:
    """A positive whole number written without a unit (``1``, ``"1000"``)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value > 0
    text = value.strip().replace("_", "") if isinstance(value, str) else ""
    return text.isdigit() and text.isascii() and int(text) > 0


def _bare_wei(value: Any) -> str:
    written = str(value).strip()
    wei = int(written.replace("_", ""))
    ether = format(Decimal(wei).scaleb(-18).normalize(), "f")
    fix = (
        f"'{written} ether' if you meant ether, or '{written} wei' to keep this amount"
        if wei < 10**9
        else f"'{ether} ether' or '{written} wei' for this amount"
    )
    return (
        f"value {written} has no unit, so it is {wei} wei ({ether} ether): write the unit, "
        f"e.g. {fix} (units: wei, gwei, ether, eth)"
    )


def _unknown_step_hint(target: str, steps: Mapping[str, Any], earlier: frozenset[str]) -> str:
    """What to say after "unknown step": the nearest earlier id, or, for ``steps.x-y``
    where ``x`` is a step and no id is nearer, how to subtract. After ``steps.`` a ``-``
    is part of the id (as in GitHub Actions), so a subtraction needs spaces."""
    near = did_you_mean(target, earlier)
    head, sep, _ = target.rpartition("-")
    while sep and head not in steps:
        head, sep, _ = head.rpartition("-")
    if not sep or (near and near != did_you_mean(head, earlier)):
        return near
    rest = target[len(head) + 1 :]
    return (
        f": steps.{target} names the step {target!r}; to subtract, put spaces around "
        f"'-' (steps.{head} - {rest})"
    )


def _no_field(owner: str, field: str, fields: tuple[str, ...]) -> str:
    """Why ``owner.field`` is refused: ``owner`` offers only ``fields``."""
    return f"{owner} has no {field!r}{did_you_mean(field, fields)} (use {', '.join(fields)})"


def _manual_inputs(workflow: Mapping[str, Any]) -> frozenset[str] | None:
    """The inputs the manual trigger declares (``None``: unknown, nothing is checked; a
    workflow without a manual trigger takes none)."""
    listed = workflow.get("triggers")
    triggers = [workflow.get("trigger"), *(listed if isinstance(listed, list) else [])]
    for trigger in triggers:
        manual = trigger.get("manual", False) if isinstance(trigger, dict) else False
        if manual is False:
            continue
        inputs = manual.get("inputs") if isinstance(manual, dict) else []
        if not isinstance(inputs, list):
            return None
        return frozenset(i for i in inputs if isinstance(i, str))
    return None


def _wants_one_value(tail: DataPath) -> bool:
    """Whether the string at ``tail`` (a path inside a step) must evaluate to a value
    rather than render as text: conditions and foreach lists."""
    return tail in (("if",), ("foreach",), ("retry", "retry_if"), ("command", "args", "that")) or (
        len(tail) == 4 and tail[:2] == ("choose", "branches") and tail[3] == "when"
    )


def _strings(path: DataPath, value: Any) -> Iterator[tuple[DataPath, str]]:
    """Every string holding ``${{`` inside ``value``, with its path."""
    if isinstance(value, str):
        if "${{" in value:
            yield path, value
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield from _strings((*path, key), inner)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _strings((*path, index), inner)


def _references(expr: Expr) -> Iterator[tuple[tuple[str | int, ...], int]]:
    """Static member paths read by ``expr``, each with the offset of its root name."""
    stack = [expr]
    while stack:
        node = stack.pop()
        path = static_path(node)
        if path is None:
            stack.extend(node.children())
            continue
        root = node
        while not isinstance(root, Name):
            root = root.children()[0]
        yield path, root.offset


def check_outside_workflows(section: str, value: Any, source: SourceMap) -> list[Diagnostic]:
    """Expressions written where nothing evaluates them (project-level declarations)."""
    return [
        Diagnostic.at(
            source.value(path),
            "expressions are only evaluated inside workflows; "
            "use ${VAR} to substitute an environment variable when the file loads",
            path,
        )
        for path, _ in _strings((section,), value)
    ]

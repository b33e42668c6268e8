"""Cross-reference rules: every name a workflow uses is declared and allowed.

The rules run on whatever validated: a :class:`ProjectView` holds the declarations and
workflow parts that passed model validation, and the names declared in the raw data, so
that one broken entry does not hide the findings about the others.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rflow import authz
from rflow.failures import FailureKind, RflowError
from rflow.hosts import check_url
from rflow.lang.abi import Abi, SignatureError, abi_entries, parse_signature
from rflow.lang.diagnostics import DataPath, Diagnostic, format_path
from rflow.lang.envsubst import EnvSubstitutionError, substitute
from rflow.lang.files import DiskFiles, Files, FileTooLarge
from rflow.lang.messages import did_you_mean
from rflow.lang.model.actions import COMMANDS
from rflow.lang.model.chain import Call, Read, SendTransaction
from rflow.lang.model.common import has_expression
from rflow.lang.model.flow import Escalate, WaitFor
from rflow.lang.model.project import Project
from rflow.lang.model.resources import (
    Budget,
    Channel,
    Config,
    Contract,
    Network,
    PagerDutyChannel,
    Principal,
    Relayer,
    SlackChannel,
)
from rflow.lang.model.steps import StepBase
from rflow.lang.model.triggers import (
    AuthApiKey,
    AuthHmac,
    AuthNone,
    EventSpec,
    ScheduleTrigger,
    WebhookTrigger,
)
from rflow.lang.model.workflow import CircuitBreaker, NotifyOnTrip, Permissions, Strategy, Workflow
from rflow.lang.timespec import cron_fields
from rflow.lang.units import UnitError, format_amount
from rflow.lang.yamlsrc import MAX_FILE_BYTES, SourceMap
from rflow.principals import OPERATOR, OPERATOR_TOKEN_ENV

RESERVED_PRINCIPALS = frozenset({"breaker", "on_failure"})
"""Names a workflow's pause records for what paused it by itself: no principal takes
them, so a pause always says whether a person or rflow placed it."""

_MATRIX_REF = re.compile(r"\s*\$\{\{\s*matrix\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}\s*")


@dataclass
class WorkflowView:
    """The parts of one workflow that validated, with their positions in the lists."""

    permissions: Permissions = field(default_factory=Permissions)
    budgets: list[str] = field(default_factory=list)
    circuit_breaker: CircuitBreaker | None = None
    strategy: Strategy | None = None
    triggers: list[tuple[DataPath, Any]] = field(default_factory=list)
    """Each trigger that validated, with its path in the workflow: ``('trigger',)`` or
    ``('triggers', i)``."""
    steps: list[tuple[DataPath, StepBase]] = field(default_factory=list)
    """Each step that validated, at any depth, with its path in the workflow:
    ``('steps', 0)``, ``('steps', 2, 'try', 1)``..."""
    signals: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, workflow: Workflow) -> WorkflowView:
        """The view of a fully valid workflow."""
        steps = [
            found
            for block, listed in (
                ("steps", workflow.steps),
                ("on_error", workflow.on_error),
                ("finally", workflow.finally_),
            )
            for i, s in enumerate(listed)
            for found in nested((block, i), s)
        ]
        if workflow.trigger is not None:
            triggers: list[tuple[DataPath, Any]] = [(("trigger",), workflow.trigger)]
        else:
            triggers = [(("triggers", i), t) for i, t in enumerate(workflow.triggers or ())]
        return cls(
            workflow.permissions,
            list(workflow.budgets),
            workflow.circuit_breaker,
            workflow.strategy,
            triggers,
            steps,
            dict(workflow.signals),
        )


def nested(path: DataPath, step: StepBase) -> list[tuple[DataPath, StepBase]]:
    """``step`` at ``path``, then every step inside it with its own path."""
    found = [(path, step)]
    for key, role_steps in _lists_by_key(step):
        for i, inner in enumerate(role_steps):
            found += nested((*path, key, i), inner)
    return found


def _lists_by_key(step: StepBase) -> list[tuple[str, list[Any]]]:
    keys = {"branch": step.kind, "try": "try", "catch": "catch", "compensate": "compensate"}
    return [(keys[role], inner) for role, inner in step.lists()]


@dataclass
class ProjectView:
    """Validated declarations and workflow views, and every name the data declares."""

    networks: dict[str, Network] = field(default_factory=dict)
    contracts: dict[str, Contract] = field(default_factory=dict)
    relayers: dict[str, Relayer] = field(default_factory=dict)
    channels: dict[str, Channel] = field(default_factory=dict)
    commands: dict[str, Any] = field(default_factory=dict)
    budgets: dict[str, Budget] = field(default_factory=dict)
    principals: dict[str, Principal] = field(default_factory=dict)
    config: Config = field(default_factory=Config)
    workflows: dict[str, WorkflowView] = field(default_factory=dict)
    declared: dict[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, project: Project) -> ProjectView:
        """The view of a fully valid project."""
        return cls(
            dict(project.networks),
            dict(project.contracts),
            dict(project.relayers),
            dict(project.channels),
            dict(project.commands),
            dict(project.budgets),
            dict(project.principals),
            project.config,
            {name: WorkflowView.of(w) for name, w in project.workflows.items()},
            {
                "networks": frozenset(project.networks),
                "contracts": frozenset(project.contracts),
                "relayers": frozenset(project.relayers),
                "channels": frozenset(project.channels),
                "commands": frozenset(project.commands),
                "budgets": frozenset(project.budgets),
                "principals": frozenset(project.principals),
                "workflows": frozenset(project.workflows),
            },
        )


_KIND = {
    "networks": "network",
    "contracts": "contract",
    "relayers": "relayer",
    "channels": "channel",
    "commands": "command",
    "budgets": "budget",
    "principals": "principal",
    "workflows": "workflow",
}


class Checker:
    """Applies the cross-reference rules to a :class:`ProjectView`."""

    def __init__(
        self,
        view: ProjectView,
        source: SourceMap,
        env: Mapping[str, str],
        files: Files | None = None,
    ) -> None:
        self.view = view
        self.source = source
        self.env = env
        self.files = files if files is not None else DiskFiles()
        """Where ABI files are read from (the disk, or a stored deployment)."""
        self.diagnostics: list[Diagnostic] = []
        self.abis: dict[str, Abi] = {}
        self.abi_files: dict[str, list[Any]] = {}
        """Contract name -> the entries of the ABI file it names, as read."""
        self.webhook_paths: dict[str, tuple[str, DataPath]] = {}
        self.event_args: dict[str, tuple[str, ...]] = {}
        """Workflow name -> the argument names of its trigger event, when its ABI is known."""

    # --- reporting -----------------------------------------------------------------

    def _error(self, path: DataPath, message: str, *, key: bool = False) -> None:
        location = self.source.key(path) if key else self.source.value(path)
        self.diagnostics.append(Diagnostic.at(location, message, path))

    def _warn(self, path: DataPath, message: str) -> None:
        self.diagnostics.append(Diagnostic.at(self.source.value(path), message, path, "warning"))

    def _declared(
        self,
        section: str,
        name: str,
        path: DataPath,
        *,
        key: bool = False,
        via: str = "",
        builtin: Iterable[str] = (),
    ) -> bool:
        names = self.view.declared.get(section, frozenset())
        if section == "principals":
            names = names | {OPERATOR}
        if name in names:
            return True
        # A near miss of a built-in name ('lg' for log) is a typo, not a missing declaration.
        hint = did_you_mean(name, [*names, *builtin]) or f" (declare it under {section})"
        self._error(path, f"unknown {_KIND[section]} {name!r}{via}{hint}", key=key)
        return False

    def _secret(self, path: DataPath, variable: str, what: str) -> None:
        if not self.env.get(variable):
            self._warn(path, f"environment variable {variable} is not set ({what})")

    # --- declarations --------------------------------------------------------------

    def _declarations(self) -> None:
        for name, contract in self.view.contracts.items():
            for network in contract.address:
                self._declared(
                    "networks", network, ("contracts", name, "address", network), key=True
                )
            self._load_abi(name, contract)
        for name, relayer in self.view.relayers.items():
            for i, network in enumerate(relayer.networks):
                self._declared("networks", network, ("relayers", name, "networks", i))
            self._signer(name, relayer)
        for name, channel in self.view.channels.items():
            if isinstance(channel, SlackChannel):
                self._secret(
                    ("channels", name, "webhook_url_env"),
                    channel.webhook_url_env,
                    f"the webhook URL of channel {name!r}",
                )
            elif isinstance(channel, PagerDutyChannel):
                self._secret(
                    ("channels", name, "routing_key_env"),
                    channel.routing_key_env,
                    f"the routing key of channel {name!r}",
                )
        for name, principal in self.view.principals.items():
            if name in RESERVED_PRINCIPALS:
                self._error(
                    ("principals", name),
                    f"{name!r} names what paused a workflow by itself (a breaker, a halt): "
                    "give this principal another name",
                    key=True,
                )
                continue
            if name == OPERATOR:
                self._error(
                    ("principals", name),
                    f"{OPERATOR!r} is the built-in principal of {OPERATOR_TOKEN_ENV}; "
                    "give this one another name",
                    key=True,
                )
                continue
            self._secret(
                ("principals", name, "token_env"),
                principal.token_env,
                f"the token of principal {name!r}; it cannot authenticate",
            )
        for name, budget in self.view.budgets.items():
            path = ("budgets", name)
            for i, relayer in enumerate(budget.scope.relayers or ()):
                self._declared("relayers", relayer, (*path, "scope", "relayers", i))
            for i, network in enumerate(budget.scope.networks or ()):
                self._declared("networks", network, (*path, "scope", "networks", i))
            for symbol in budget.max_token_value:
                if symbol not in self.view.declared.get("contracts", ()):
                    self._warn(
                        (*path, "max_token_value", symbol),
                        f"token {symbol!r} has no matching contract, so this cap is never charged "
                        f"(declare contracts.{symbol} to charge its transfers)",
                    )

    def _signer(self, name: str, relayer: Relayer) -> None:
        path: DataPath = ("relayers", name)
        if relayer.key_env is not None:
            self._secret((*path, "key_env"), relayer.key_env, f"the key of relayer {name!r}")
        if relayer.pkcs11 is not None:
            hsm = relayer.pkcs11
            self._secret(
                (*path, "pkcs11", "pin_env"), hsm.pin_env, f"the PIN of relayer {name!r}'s token"
            )
            if not os.path.isfile(hsm.module):
                self._warn(
                    (*path, "pkcs11", "module"),
                    f"no PKCS#11 library at {hsm.module} here: relayer {name!r} cannot sign "
                    "on a worker without it",
                )
        if relayer.aws_kms is not None:
            kms = relayer.aws_kms
            where = (*path, "aws_kms")
            for field, what in (
                ("access_key_id_env", "the AWS access key id"),
                ("secret_access_key_env", "the AWS secret access key"),
            ):
                self._secret((*where, field), getattr(kms, field), f"{what} of relayer {name!r}")
            if kms.endpoint_env is not None:
                self._secret(
                    (*where, "endpoint_env"),
                    kms.endpoint_env,
                    f"the KMS endpoint of relayer {name!r}",
                )

    def _load_abi(self, name: str, contract: Contract) -> None:
        path = ("contracts", name, "abi")
        if isinstance(contract.abi, list):
            try:
                self.abis[name] = Abi.from_entries(contract.abi)
            except ValueError as exc:
                self._error(path, f"inline ABI is malformed: {exc}")
            return
        if contract.abi is None:
            return
        declared_in = self.source.value(path)
        base = Path(declared_in.file).parent if declared_in else Path()
        file = base / contract.abi
        try:
            entries = abi_entries(self.files.read_text(file))
            self.abis[name] = Abi.from_entries(entries)
            self.abi_files[name] = entries
        except FileTooLarge:
            self._error(
                path,
                f"ABI file {str(file)!r} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB",
            )
        except FileNotFoundError:
            self._error(path, f"ABI file not found: {str(file)!r}")
        except (OSError, UnicodeDecodeError) as exc:
            self._error(path, f"cannot read ABI file {str(file)!r}: {exc}")
        except (json.JSONDecodeError, ValueError) as exc:
            self._error(path, f"ABI file {str(file)!r} is not a JSON ABI: {exc}")

    # --- workflows -----------------------------------------------------------------

    def _workflows(self) -> None:
        for name, workflow in self.view.workflows.items():
            base: DataPath = ("workflows", name)
            for i, budget in enumerate(workflow.budgets):
                self._declared("budgets", budget, (*base, "budgets", i))
            for i, relayer in enumerate(workflow.permissions.relayers):
                self._declared("relayers", relayer, (*base, "permissions", "relayers", i))
            if workflow.circuit_breaker is not None:
                for i, action in enumerate(workflow.circuit_breaker.on_trip):
                    if isinstance(action, NotifyOnTrip):
                        where = (*base, "circuit_breaker", "on_trip", i, "notify", "channel")
                        self._declared("channels", action.notify.channel, where)
            self._trigger(name, workflow)
            for where, step in workflow.steps:
                self._step(workflow, (*base, *where), step)

    def _trigger(self, name: str, workflow: WorkflowView) -> None:
        schedules: dict[tuple[str, str], DataPath] = {}
        event_args: list[tuple[str, ...] | None] = []
        for where, trigger in workflow.triggers:
            path: DataPath = ("workflows", name, *where)
            if trigger.kind == "event":
                event_args.append(self._event((*path, "event"), trigger.event, "an event trigger"))
            elif isinstance(trigger, WebhookTrigger):
                self._webhook(name, path, trigger.webhook)
            elif isinstance(trigger, ScheduleTrigger):
                spec = trigger.schedule
                try:
                    same = (cron_fields(spec.cron), spec.timezone)
                except UnitError:  # already reported by the model
                    continue
                first = schedules.get(same)
                if first is not None:
                    self._error(
                        (*path, "schedule"),
                        f"this schedule is the one of {format_path(first[2:])} (cron "
                        f"{spec.cron!r} in {spec.timezone}): each time would fire twice",
                    )
                else:
                    schedules[same] = path
        # trigger.args is checked against the event when every trigger is one (a webhook
        # or manual run has no args: reading them there gives null).
        if event_args and len(event_args) == len(workflow.triggers) and None not in event_args:
            known = [arg for args in event_args if args for arg in args]
            self.event_args[name] = tuple(dict.fromkeys(known))

    def _webhook(self, name: str, path: DataPath, spec: Any) -> None:
        first = self.webhook_paths.get(spec.path)
        where = (*path, "webhook", "path")
        if first is not None:
            location = self.source.value(first[1])
            owner = (
                f"this workflow's {format_path(first[1][2:-2])}"
                if first[0] == name
                else f"workflow {first[0]!r}"
            )
            self._error(
                where, f"webhook path {spec.path!r} is already used by {owner} ({location})"
            )
        else:
            self.webhook_paths[spec.path] = (name, where)
        if isinstance(spec.auth, AuthApiKey | AuthHmac):
            self._secret(
                (*path, "webhook", "auth", "secret_env"),
                spec.auth.secret_env,
                f"the webhook secret of workflow {name!r}",
            )

    def _event(self, path: DataPath, spec: EventSpec, what: str) -> tuple[str, ...] | None:
        self._declared("networks", spec.network, (*path, "network"))
        if not self._declared("contracts", spec.contract, (*path, "contract")):
            return None
        abi = self.abis.get(spec.contract)
        if abi is None:
            contract = self.view.contracts.get(spec.contract)
            if contract is not None and contract.abi is None:
                self._error(
                    (*path, "contract"),
                    f"contract {spec.contract!r} has no abi: {what} needs it to decode {spec.name}",
                )
            return None
        args = abi.events.get(spec.name)
        if args is None:
            hint = (
                did_you_mean(spec.name, abi.events)
                or f" (its events: {', '.join(sorted(abi.events)) or 'none'})"
            )
            self._error(
                (*path, "name"), f"contract {spec.contract!r} has no event {spec.name!r}{hint}"
            )
            return None
        for arg in spec.filter:
            if arg not in args:
                self._error(
                    (*path, "filter", arg),
                    f"event {spec.name} has no argument {arg!r}{did_you_mean(arg, args)}",
                    key=True,
                )
        return args

    def _values(self, workflow: WorkflowView, text: str) -> list[tuple[str, str]]:
        """The static values ``text`` can take, each with a note on where it came from."""
        if not has_expression(text):
            return [(text, "")]
        match = _MATRIX_REF.fullmatch(text)
        if match is None or workflow.strategy is None:
            return []
        values = workflow.strategy.matrix.get(match.group(1), [])
        return [(v, f" (from matrix.{match.group(1)})") for v in values if isinstance(v, str)]

    def _step(self, workflow: WorkflowView, path: DataPath, step: StepBase) -> None:
        action = step.action
        where = (*path, step.kind)
        if step.kind == "send_transaction":
            self._send(workflow, where, action)
        elif step.kind == "read":
            self._networks(workflow, (*where, "network"), action.network)
            self._target(workflow, where, action, action.network)
        elif step.kind == "query":
            self._networks(workflow, (*where, "network"), action.network)
        elif step.kind == "http_call" and workflow.permissions.http_hosts is not None:
            self._http_host(workflow, (*where, "url"), action.url)
        elif step.kind == "notify":
            self._declared("channels", action.channel, (*where, "channel"))
        elif step.kind == "command" and action.name not in COMMANDS:
            self._declared("commands", action.name, (*where, "name"), builtin=COMMANDS)
        elif step.kind == "wait_for" and action.event is not None:
            self._event((*where, "event"), action.event, "a wait for an event")
        elif step.kind == "wait_for" and action.approval is not None:
            self._approval(where, action)
        elif step.kind == "call_workflow":
            self._call(where, action)
        elif step.kind == "wait_for" and action.webhook is not None:
            self._wait_webhook((*where, "webhook"), action.webhook)

    def _call(self, path: DataPath, call: Any) -> None:
        """A called workflow exists, takes the inputs given, and starts one run per call."""
        if not self._declared("workflows", call.workflow, (*path, "workflow")):
            return
        child = self.view.workflows.get(call.workflow)
        if child is None:
            return  # it did not validate: its own errors say why
        if child.strategy is not None:
            self._error(
                (*path, "workflow"),
                f"workflow {call.workflow!r} has a strategy.matrix: a call starts one child "
                "run, so it cannot call a workflow that fans out (call one without a matrix)",
            )
        manual = [t for _, t in child.triggers if t.kind == "manual"]
        if not manual:
            self._error(
                (*path, "workflow"),
                f"workflow {call.workflow!r} has no manual trigger: a called workflow declares "
                "the inputs it takes there (trigger: {manual: {inputs: [...]}})",
            )
            return
        declared = manual[0].manual.inputs
        for name in call.inputs:
            if declared and name not in declared:
                self._error(
                    (*path, "inputs", name),
                    f"workflow {call.workflow!r} takes no input {name!r}"
                    f"{did_you_mean(name, declared)} (its manual trigger declares: "
                    f"{', '.join(declared)})",
                    key=True,
                )

    def _wait_webhook(self, path: DataPath, spec: Any) -> None:
        """A webhook wait says how its caller authenticates: without ``auth`` it is
        refused; ``auth: {type: none}`` is taken, with a warning (the URL's token is then
        the only credential)."""
        if "auth" not in spec.model_fields_set:
            self._error(
                path,
                "a webhook wait needs auth: api_key or hmac (as a webhook trigger's), or "
                "{type: none} to let anyone who has its resume URL answer it",
                key=True,
            )
        elif isinstance(spec.auth, AuthNone):
            self._warn(
                (*path, "auth"),
                "auth: none: anyone who has the wait's resume URL can answer it (the URL's "
                "token is the only credential)",
            )
        else:
            self._secret(
                (*path, "auth", "secret_env"),
                spec.auth.secret_env,
                "the secret of a webhook wait; it refuses every request",
            )

    def _approval(self, path: DataPath, wait: WaitFor) -> None:
        for i, approver in enumerate(wait.approval.approvers):
            where = (*path, "approval", "approvers", i)
            if not self._declared("principals", approver, where):
                continue
            declared = self.view.principals.get(approver)
            if declared is not None:
                grant = authz.Principal.of(approver, declared.role, declared.can)
                if not authz.decide(grant, "approvals.answer"):
                    self._warn(
                        where,
                        f"principal {approver!r} is a {declared.role} that may not answer "
                        "approvals: give it role approver (or can: [approvals.answer])",
                    )
        if isinstance(wait.on_timeout, Escalate):
            where = (*path, "on_timeout", "escalate", "channel")
            self._declared("channels", wait.on_timeout.escalate.channel, where)

    def _http_host(self, workflow: WorkflowView, path: DataPath, url: str) -> None:
        """A literal URL outside ``permissions.http_hosts``, with its ``${VAR}`` filled in
        from this environment (a rendered one is checked when the call is made)."""
        if has_expression(url):
            return
        try:
            url, _ = substitute(url, self.env)
        except EnvSubstitutionError:  # already reported where the file was read
            return
        try:
            check_url(url, workflow.permissions.http_hosts)
        except RflowError as exc:
            if exc.kind == FailureKind.PERMISSION_DENIED:
                self._error(path, exc.message)

    def _networks(self, workflow: WorkflowView, path: DataPath, text: str) -> list[str]:
        found = []
        for value, via in self._values(workflow, text):
            if self._declared("networks", value, path, via=via):
                found.append(value)
        return found

    def _send(self, workflow: WorkflowView, path: DataPath, send: SendTransaction) -> None:
        networks = self._networks(workflow, (*path, "network"), send.network)
        allowed = workflow.permissions.relayers
        for relayer, via in self._values(workflow, send.relayer):
            if not self._declared("relayers", relayer, (*path, "relayer"), via=via):
                continue
            if relayer not in allowed:
                fix = (
                    f"it lists {', '.join(allowed)}"
                    if allowed
                    else f"add permissions: {{ relayers: [{relayer}] }}"
                )
                self._error(
                    (*path, "relayer"),
                    f"relayer {relayer!r}{via} is not in this workflow's permissions.relayers ({fix})",
                )
            declared = self.view.relayers.get(relayer)
            for network in networks:
                if declared is not None and network not in declared.networks:
                    self._error(
                        (*path, "network"),
                        f"relayer {relayer!r} is not enabled on network {network!r} (its networks: {', '.join(declared.networks)})",
                    )
        cap = workflow.permissions.max_value_per_tx
        if send.calls is None:
            self._target(workflow, path, send, send.network)
            self._value_cap(path, send.value, cap, "value")
            return
        total = 0
        for i, call in enumerate(send.calls):
            self._target(workflow, (*path, "calls", i), call, send.network)
            self._value_cap((*path, "calls", i), call.value, cap, "value")
            total += call.value if isinstance(call.value, int) else 0
        if cap is not None and total > cap:
            self._error(
                (*path, "calls"),
                f"the calls send {format_amount(total)} in total, above permissions.max_value_per_tx ({format_amount(cap)})",
            )

    def _value_cap(self, path: DataPath, value: int | str, cap: int | None, name: str) -> None:
        if cap is not None and isinstance(value, int) and value > cap:
            self._error(
                (*path, name),
                f"value {format_amount(value)} exceeds permissions.max_value_per_tx ({format_amount(cap)})",
            )

    def _target(
        self,
        workflow: WorkflowView,
        path: DataPath,
        action: SendTransaction | Call | Read,
        network_text: str,
    ) -> None:
        """Check a call's contract (declared, deployed on the network) and its function."""
        function = action.function
        signature = None
        if function is not None:
            try:
                signature = parse_signature(function)
            except SignatureError:  # already reported by the model
                return
            if isinstance(action.args, list) and len(action.args) != len(signature.inputs):
                count = len(signature.inputs)
                self._error(
                    (*path, "args"),
                    f"{signature.selector_text} takes {count} argument{'s' if count != 1 else ''}, got {len(action.args)}",
                )
        if action.contract is None:
            return
        for contract, via in self._values(workflow, action.contract):
            if not self._declared("contracts", contract, (*path, "contract"), via=via):
                continue
            declared = self.view.contracts.get(contract)
            for network, _ in self._values(workflow, network_text):
                if (
                    declared is not None
                    and network in self.view.declared.get("networks", ())
                    and network not in declared.address
                ):
                    self._error(
                        (*path, "contract"),
                        f"contract {contract!r} has no address on network {network!r}",
                    )
            abi = self.abis.get(contract)
            if abi is not None and signature is not None:
                self._function(abi, contract, (*path, "function"), signature.name, signature.inputs)

    def _function(
        self, abi: Abi, contract: str, path: DataPath, name: str, inputs: Sequence[str]
    ) -> None:
        overloads = abi.functions.get(name)
        if overloads is None:
            self._error(
                path,
                f"contract {contract!r} has no function {name!r}{did_you_mean(name, abi.functions)}",
            )
        elif tuple(inputs) not in overloads:
            known = " or ".join(f"{name}({','.join(o)})" for o in overloads)
            self._error(path, f"{contract}.{name} takes {known}, not ({','.join(inputs)})")

    def run(self) -> list[Diagnostic]:
        """Apply every rule; the diagnostics found."""
        self._declarations()
        self._workflows()
        return self.diagnostics

"""Who may do what: one pure decision, :func:`decide`, over one table, :data:`ACTIONS`.

Every API route, console page or form and CLI command names the action it needs; the
HTTP API, the console and the CLI ask :func:`decide` and never look at a role
themselves. The rules, in the order they are applied:

1. An action that is not in :data:`ACTIONS` is refused to everyone (a surface that names
   a misspelt action fails closed).
2. Without a principal (no token, or one nobody holds) everything is refused.
3. Roles are ordered ``none < viewer < approver < operator``: a principal may take every
   action whose least role is its own role or below it.
4. A principal may also take the actions its ``can`` names, whatever its role.
5. An approval that lists ``approvers`` is answered by those principals only, whatever
   their role (one that lists none, by any principal that may answer approvals).

The decision says why either way, naming the principal, its role, the action and the
target, so that a refusal tells the person what they would need and the audit trail
records the reason. Adding an action is one line of :data:`ACTIONS`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

Role = Literal["none", "viewer", "approver", "operator"]
ROLES: tuple[Role, ...] = ("none", "viewer", "approver", "operator")
"""The roles, least first: each may do what the ones before it may."""

DEFAULT_ROLE: Role = "viewer"
"""The role of a declared principal that names none (``operator`` is built in)."""


@dataclass(frozen=True, slots=True)
class Action:
    """One thing a principal may be allowed to do."""

    name: str
    role: Role
    """The least role that may take it."""
    what: str
    """What it allows, for people (the reference and refusals show it)."""
    args: tuple[str, ...] = ()
    """The request's fields the audit trail keeps (never free-form input or a secret)."""
    audited: bool = True
    """Whether taking it is written to the audit trail; reads are not (they change
    nothing, and the console reads every few seconds). A refusal always is."""


# fmt: off
ACTIONS: dict[str, Action] = {
    action.name: action
    for action in (
        Action("metrics.read", "viewer", "scrape the worker's Prometheus metrics (`/metrics`)", audited=False),
        Action("runs.read", "viewer", "read runs, approvals, workflows, schedules, budgets, sends, dead letters and deployments", audited=False),
        Action("audit.read", "viewer", "read the audit trail", audited=False),
        Action("state.read", "viewer", "read a workflow's durable state (`rflow state`, `GET /api/workflows/{name}/state`)", audited=False),
        Action("approvals.answer", "approver", "approve or reject an approval (one whose `approvers` list the principal, or that lists none); see the resume URLs of webhook waits", ("step", "choice")),
        Action("runs.run", "operator", "start a run: a manual trigger, `rflow run`, `rflow trigger`", ("workflow", "key")),
        Action("runs.retry", "operator", "continue a failed run as a new run (settled steps keep their results)", ("from", "yes")),
        Action("runs.resend", "operator", "a retry from an earlier step that sends settled transactions again (needs `runs.retry` too)", ("from",)),
        Action("runs.cancel", "operator", "cancel a run at its next step boundary", ("reason",)),
        Action("runs.signal", "operator", "send a signal to a run (`rflow runs signal`; a step waits for it with `wait_for: {signal: ...}`)", ("name",)),
        Action("sends.speedup", "operator", "replace a pending send's transaction with one paying more", ("max_fee", "tip", "above_cap")),
        Action("sends.cancel", "operator", "cancel a pending send with a zero-value self-transfer at its nonce"),
        Action("workflows.pause", "operator", "pause and resume a workflow", ("reason",)),
        Action("schedules.toggle", "operator", "disable and enable a schedule", ("reason",)),
        Action("dead_letters.replay", "operator", "produce a dead-lettered record back to its topic"),
        Action("backtests.read", "viewer", "read the reports of past backtests (the console's Backtests)", audited=False),
        Action("backtests.run", "operator", "replay retained firings through a candidate project in a sandbox (`rflow backtest`)", ("since", "limit")),
        Action("deploy", "operator", "publish a project as the new deployment (`rflow deploy`)"),
        Action("deploy.rollback", "operator", "publish a project older than the newest deployment, going back (`rflow deploy --rollback`, `rflow worker --rollback`)"),
    )
}
# fmt: on
"""Every action, with the least role that may take it: the one table of the policy."""

ACTION_NAMES: tuple[str, ...] = tuple(ACTIONS)
"""The actions' names, in the table's order (what a principal's ``can`` may list)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who makes a request: a name, a role, and the actions granted beyond the role."""

    name: str
    role: Role = DEFAULT_ROLE
    can: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def of(cls, name: str, role: Role = DEFAULT_ROLE, can: Iterable[str] = ()) -> Principal:
        return cls(name, role, frozenset(can))

    def __str__(self) -> str:
        return f"{self.name!r} ({self.role})"


@dataclass(frozen=True, slots=True)
class Target:
    """What an action is taken on: its kind (``run``, ``send``, ``workflow``,
    ``schedule``, ``dead_letter``, ``deployment``...) and its id, when it has one."""

    kind: str
    id: str | None = None
    approvers: tuple[str, ...] = ()
    """For an approval: the principals it names (none: any who may answer approvals)."""

    def __str__(self) -> str:
        return self.kind if self.id is None else f"{self.kind} {self.id}"


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether the action may be taken, and why (a sentence for people)."""

    allowed: bool
    why: str

    def __bool__(self) -> bool:
        return self.allowed


def roles_allowed(action: str) -> tuple[Role, ...]:
    """The roles that may take ``action`` (none for an unknown action)."""
    found = ACTIONS.get(action)
    if found is None:
        return ()
    return ROLES[ROLES.index(found.role) :]


def decide(principal: Principal | None, action: str, target: Target | None = None) -> Decision:
    """May ``principal`` take ``action`` (on ``target``)? The rules are this module's."""
    on = f" on {target}" if target is not None else ""
    found = ACTIONS.get(action)
    if found is None:
        return Decision(False, f"{action!r} is not an action rflow knows: refused to everyone")
    if principal is None:
        return Decision(False, f"no principal: {action}{on} needs a principal's token")
    if ROLES.index(principal.role) >= ROLES.index(found.role):
        why = "its role allows it"
    elif action in principal.can:
        why = "its can lists it"
    else:
        return Decision(
            False,
            f"principal {principal} may not {action}{on}: that needs role {found.role} (or "
            f"{action} in the principal's can)",
        )
    if target is not None and target.approvers and principal.name not in target.approvers:
        return Decision(
            False,
            f"principal {principal} may not {action}{on}: it is not one of its approvers "
            f"({', '.join(target.approvers)})",
        )
    return Decision(True, f"principal {principal} may {action}{on}: {why}")


def allowed_actions(principal: Principal | None) -> frozenset[str]:
    """Every action ``principal`` may take (what the console shows it)."""
    return frozenset(name for name in ACTIONS if decide(principal, name))


def arguments(action: str, given: dict[str, object] | None) -> dict[str, object]:
    """The fields of ``given`` that the audit trail keeps for ``action``: those its
    table row lists, text cut at 200 characters."""
    found = ACTIONS.get(action)
    if found is None or not given:
        return {}
    kept: dict[str, object] = {}
    for name in found.args:
        value = given.get(name)
        if value is None:
            continue
        if isinstance(value, str) and len(value) > 200:
            value = value[:200] + "…"
        elif not isinstance(value, str | int | float | bool):
            value = str(value)[:200]
        kept[name] = value
    return kept

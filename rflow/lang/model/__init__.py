"""The workflow language's data model: frozen pydantic models, unknown fields rejected.

The names below are imported from their module when first used: a reader of one
module (``rflow.lang.model.resources``, say: ``rflow budgets ls``) creates its models
only, not every model of the language.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rflow.lang.model.actions import COMMANDS, Command, Delay, HttpCall, Notify
    from rflow.lang.model.chain import Call, Query, Read, SendTransaction
    from rflow.lang.model.common import Model
    from rflow.lang.model.flow import (
        OPERATORS,
        Approval,
        Branch,
        ChoiceOption,
        Choose,
        Comparison,
        Escalate,
        Escalation,
        Goto,
        ListChange,
        WaitFor,
        WaitWebhook,
    )
    from rflow.lang.model.project import SECTIONS, Project
    from rflow.lang.model.resources import (
        AwsKmsKey,
        Budget,
        BudgetScope,
        Channel,
        Config,
        Contract,
        Network,
        Pkcs11Key,
        Principal,
        Relayer,
    )
    from rflow.lang.model.steps import ACTIONS, STEP_CLASSES, Backoff, Retry, Step, StepBase
    from rflow.lang.model.triggers import (
        TRIGGER_KINDS,
        EventSpec,
        ScheduleSpec,
        Trigger,
        WebhookSpec,
    )
    from rflow.lang.model.workflow import (
        CircuitBreaker,
        Concurrency,
        Permissions,
        RateLimit,
        Strategy,
        Workflow,
    )

_HOMES = {
    **dict.fromkeys(("COMMANDS", "Command", "Delay", "HttpCall", "Notify"), "actions"),
    **dict.fromkeys(("Call", "Query", "Read", "SendTransaction"), "chain"),
    **dict.fromkeys(("Model",), "common"),
    **dict.fromkeys(
        (
            "OPERATORS",
            "Approval",
            "Branch",
            "ChoiceOption",
            "Choose",
            "Comparison",
            "Escalate",
            "Escalation",
            "Goto",
            "ListChange",
            "WaitFor",
            "WaitWebhook",
        ),
        "flow",
    ),
    **dict.fromkeys(("SECTIONS", "Project"), "project"),
    **dict.fromkeys(
        (
            "AwsKmsKey",
            "Budget",
            "BudgetScope",
            "Channel",
            "Config",
            "Contract",
            "Network",
            "Pkcs11Key",
            "Principal",
            "Relayer",
        ),
        "resources",
    ),
    **dict.fromkeys(("ACTIONS", "STEP_CLASSES", "Backoff", "Retry", "Step", "StepBase"), "steps"),
    **dict.fromkeys(
        ("TRIGGER_KINDS", "EventSpec", "ScheduleSpec", "Trigger", "WebhookSpec"), "triggers"
    ),
    **dict.fromkeys(
        ("CircuitBreaker", "Concurrency", "Permissions", "RateLimit", "Strategy", "Workflow"),
        "workflow",
    ),
}
"""Each exported name and the submodule that defines it."""


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'rflow.lang.model' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"rflow.lang.model.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ACTIONS",
    "COMMANDS",
    "OPERATORS",
    "SECTIONS",
    "STEP_CLASSES",
    "TRIGGER_KINDS",
    "Approval",
    "AwsKmsKey",
    "Backoff",
    "Branch",
    "Budget",
    "BudgetScope",
    "Call",
    "Channel",
    "ChoiceOption",
    "Choose",
    "CircuitBreaker",
    "Command",
    "Comparison",
    "Concurrency",
    "Config",
    "Contract",
    "Delay",
    "Escalate",
    "Escalation",
    "EventSpec",
    "Goto",
    "HttpCall",
    "ListChange",
    "Model",
    "Network",
    "Notify",
    "Permissions",
    "Pkcs11Key",
    "Principal",
    "Project",
    "Query",
    "RateLimit",
    "Read",
    "Relayer",
    "Retry",
    "ScheduleSpec",
    "SendTransaction",
    "Step",
    "StepBase",
    "Strategy",
    "Trigger",
    "WaitFor",
    "WaitWebhook",
    "WebhookSpec",
    "Workflow",
]

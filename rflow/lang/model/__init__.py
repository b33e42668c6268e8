"""The workflow language's data model: frozen pydantic models, unknown fields rejected."""

from rflow.lang.model.actions import COMMANDS, Command, Delay, HttpCall, Notify
from rflow.lang.model.chain import Call, Query, Read, SendTransaction
from rflow.lang.model.common import Model
from rflow.lang.model.flow import (
    OPERATORS,
    Approval,
    Branch,
    Choose,
    Comparison,
    Goto,
    ListChange,
    WaitFor,
    WaitWebhook,
)
from rflow.lang.model.project import SECTIONS, Project
from rflow.lang.model.resources import (
    Budget,
    BudgetScope,
    Channel,
    Config,
    Contract,
    Network,
    Relayer,
)
from rflow.lang.model.steps import ACTIONS, STEP_CLASSES, Backoff, Retry, Step, StepBase
from rflow.lang.model.triggers import TRIGGER_KINDS, EventSpec, ScheduleSpec, Trigger, WebhookSpec
from rflow.lang.model.workflow import (
    CircuitBreaker,
    Concurrency,
    Permissions,
    RateLimit,
    Strategy,
    Workflow,
)

__all__ = [
    "ACTIONS",
    "COMMANDS",
    "OPERATORS",
    "SECTIONS",
    "STEP_CLASSES",
    "TRIGGER_KINDS",
    "Approval",
    "Backoff",
    "Branch",
    "Budget",
    "BudgetScope",
    "Call",
    "Channel",
    "Choose",
    "CircuitBreaker",
    "Command",
    "Comparison",
    "Concurrency",
    "Config",
    "Contract",
    "Delay",
    "EventSpec",
    "Goto",
    "HttpCall",
    "ListChange",
    "Model",
    "Network",
    "Notify",
    "Permissions",
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

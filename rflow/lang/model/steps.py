"""A step: common fields around exactly one action."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
    model_validator,
)

from rflow.lang.model.actions import COMMANDS, Command, Delay, HttpCall, Notify
from rflow.lang.model.chain import Query, Read, SendTransaction
from rflow.lang.model.common import (
    Condition,
    Duration,
    Model,
    Name,
    by_key,
    has_expression,
    invalid,
    invalid_at,
)
from rflow.lang.model.flow import CallWorkflow, Choose, ListChange, StateValues, WaitFor
from rflow.lang.units import format_duration

MIN_DELAY = timedelta(milliseconds=100)
MAX_DELAY = timedelta(seconds=60)
MIN_MAX_DELAY = timedelta(seconds=1)
MAX_MAX_DELAY = timedelta(minutes=5)


def _within(low: timedelta, high: timedelta, what: str) -> Any:
    def check(value: timedelta) -> timedelta:
        if not low <= value <= high:
            raise invalid(
                f"{what} must be between {format_duration(low)} and {format_duration(high)}, "
                f"got {format_duration(value)}"
            )
        return value

    return AfterValidator(check)


class Backoff(Model):
    """How long to wait between attempts."""

    strategy: Literal["fixed", "exponential"] = "exponential"
    """fixed: every retry waits ``delay``; exponential: ``delay * multiplier ** (n - 1)``
    before retry n, at most ``max_delay``."""
    delay: Annotated[Duration, _within(MIN_DELAY, MAX_DELAY, "a retry's delay")] = timedelta(
        seconds=1
    )
    """The first (fixed: every) delay, 100ms to 60s."""
    multiplier: float = Field(2.0, ge=1.0, le=3.0)
    """Exponential growth per attempt, 1 to 3."""
    max_delay: Annotated[Duration, _within(MIN_MAX_DELAY, MAX_MAX_DELAY, "max_delay")] = timedelta(
        seconds=60
    )
    """Ceiling of the exponential delay and of a Retry-After honoured, 1s to 5m."""
    jitter: bool = True
    """Spread each delay by up to 20% either way so retries do not arrive in step."""

    @model_validator(mode="after")
    def _ceiling(self) -> Backoff:
        if self.strategy == "exponential" and self.max_delay < self.delay:
            raise invalid("max_delay is shorter than delay")
        return self


def _backoff_shorthand(value: Any) -> Any:
    # "backoff: 10s" reads as a fixed delay between attempts.
    if isinstance(value, str):
        return {"strategy": "fixed", "delay": value}
    return value


def _backoff_form(value: Any) -> str:
    return "delay" if isinstance(value, str | timedelta) else "policy"


BackoffSpec = Annotated[
    Annotated[Backoff, Tag("policy")] | Annotated[Duration, Tag("delay")],
    Discriminator(_backoff_form),
    BeforeValidator(_backoff_shorthand),
]
"""A backoff policy, or a duration as shorthand for a fixed delay."""


class Retry(Model):
    """Retries for pre-queue and off-chain failures (rpc_timeout, rate_limited, ...).

    A reverted or failed on-chain transaction is never retried blindly.
    """

    max_attempts: int = Field(3, ge=1, le=50)
    """Attempts in total, the first included (seed 004's maxRetries n is n + 1 here)."""
    retry_if: Condition | None = None
    """An expression over error (kind, message, retry_after); default: any retryable kind."""
    backoff: BackoffSpec = Backoff()
    """A duration (a fixed delay, e.g. 10s) or {strategy, delay, multiplier, max_delay, jitter}."""
    retry_on_timeout: bool = False
    """Retry an attempt that failed with kind timeout too (not on a send_transaction,
    whose timeout cancels it at its nonce, nor on a wait_for, whose on_timeout decides)."""


def _foreach(value: Any) -> Any:
    if isinstance(value, list) or has_expression(value):
        return value
    raise invalid(f"foreach expects an expression giving a list, or a list, got {value!r}")


Foreach = Annotated[
    list[Any] | str,
    BeforeValidator(_foreach),
    WithJsonSchema(
        {
            "anyOf": [{"type": "array"}, {"type": "string", "pattern": r"\$\{\{"}],
            "description": "run the action once per element; each sees ${{ item }} and ${{ item_index }}",
        }
    ),
]


class StepBase(Model):
    """Fields every step has, whatever its action."""

    kind: ClassVar[str] = ""
    id: Name
    """Unique within the workflow (every step, inside blocks too); results are
    ${{ steps.<id>.output }}."""
    if_: Condition | None = Field(None, alias="if")
    """Run the step only when this holds (per item inside foreach); else it is skipped."""
    retry: Retry | None = None
    """Retry a failed attempt of a retryable kind (rpc_timeout, rate_limited,
    data_unavailable, gas_cap_exceeded, signer_unavailable): max_attempts, backoff,
    retry_if."""
    timeout: Duration | None = None
    """How long one attempt may take: an action fails with kind timeout; a send_transaction
    still unmined is cancelled (a zero-value self-transfer at its nonce) and fails timeout
    once that is mined; a wait_for fires its on_timeout. Not on steps that never wait
    (choose, delay, the log, assert and fail commands)."""
    continue_on_error: bool = False
    """A failure becomes data (steps.<id>.status and .error) and the run continues."""
    foreach: Foreach | None = None
    """Run the action once per element of a list."""
    max_parallel: int | None = Field(None, ge=1, le=1000)
    """Iterations in flight at once (default 1: strictly sequential)."""
    batch_size: int | None = Field(None, ge=1, le=10_000)
    """Group elements: each iteration's item is a list of up to this many."""
    max_iterations: int | None = Field(None, ge=1, le=1_000_000)
    """A safety cap: a list that gives more iterations than this (batches, with
    batch_size) fails the step before any iteration starts."""
    compensate: list[Step] | None = Field(None, min_length=1)
    """Inside a try block: steps that undo this one. They run, once, if a later step of
    the block fails (or the block is cancelled) after this one completed, in reverse order
    of completion with the other compensations, before the block's catch."""

    @model_validator(mode="after")
    def _foreach_options(self) -> StepBase:
        options = ("max_parallel", "batch_size", "max_iterations")
        orphans = [f for f in options if getattr(self, f) is not None]
        if orphans and self.foreach is None:
            verb = "applies" if len(orphans) == 1 else "apply"
            raise invalid(f"{' and '.join(orphans)} only {verb} to a foreach step")
        if isinstance(self.foreach, list) and (why := self.over_cap(len(self.foreach))):
            raise invalid_at(self, ("foreach",), why)
        return self

    def iterations(self, items: int) -> int:
        """How many iterations a list of ``items`` elements gives (batches, with batch_size)."""
        size = self.batch_size or 1
        return -(-items // size)

    def over_cap(self, items: int) -> str | None:
        """Why a list of ``items`` elements is refused by ``max_iterations``, or ``None``."""
        count = self.iterations(items)
        if self.max_iterations is None or count <= self.max_iterations:
            return None
        batches = f" (batches of {self.batch_size})" if self.batch_size else ""
        return (
            f"foreach gives {count} iterations{batches}, more than max_iterations "
            f"({self.max_iterations}): no iteration started"
        )

    @model_validator(mode="after")
    def _timeout_honoured(self) -> StepBase:
        if self.timeout is not None and (why := self.no_timeout()) is not None:
            raise invalid_at(self, ("timeout",), why)
        if (
            self.retry is not None
            and self.retry.retry_on_timeout
            and (why := self.no_timeout_retry()) is not None
        ):
            raise invalid_at(self, ("retry", "retry_on_timeout"), why)
        return self

    def no_timeout(self) -> str | None:
        """Why a step ``timeout`` cannot be honoured on this step, or ``None`` if it can."""
        return None

    def no_timeout_retry(self) -> str | None:
        """Why a timed-out attempt of this step cannot be retried, or ``None`` if it can."""
        if self.no_timeout() is None:
            return None
        what = f"the {self.action.name} command" if self.kind == "command" else f"a {self.kind}"
        return f"{what} never times out: retry_on_timeout cannot apply (remove it)"

    @property
    def action(self) -> Any:
        """The action's model (or mapping for state_set)."""
        return getattr(self, self.kind)

    def lists(self) -> list[tuple[str, list[Any]]]:
        """The lists of steps this step holds, each with its role: ``branch`` (parallel,
        race), ``try`` and ``catch`` (try), ``compensate`` (any step in a try block)."""
        return [("compensate", self.compensate)] if self.compensate else []

    @property
    def parallelism(self) -> int:
        """Iterations in flight at once."""
        return self.max_parallel or 1


class SendTransactionStep(StepBase):
    """A step that sends a transaction."""

    kind: ClassVar[str] = "send_transaction"
    send_transaction: SendTransaction
    """The transaction to send."""

    def no_timeout_retry(self) -> str | None:
        return (
            "a send_transaction that times out is cancelled at its nonce and fails for good: "
            "it is never retried (remove retry_on_timeout)"
        )


class ReadStep(StepBase):
    """A step that calls a view function."""

    kind: ClassVar[str] = "read"
    read: Read
    """The view function to call."""


class QueryStep(StepBase):
    """A step that makes a read-only JSON-RPC call."""

    kind: ClassVar[str] = "query"
    query: Query
    """The JSON-RPC method to call."""


class CommandStep(StepBase):
    """A step that runs a built-in command."""

    kind: ClassVar[str] = "command"
    command: Command
    """A built-in command (log, assert, fail) or one declared under `commands`."""

    def no_timeout(self) -> str | None:
        if self.command.name in COMMANDS:
            return (
                f"the {self.command.name} command runs inline and settles at once: "
                "a timeout cannot apply to it (remove it)"
            )
        return None


class HttpCallStep(StepBase):
    """A step that makes an HTTP request."""

    kind: ClassVar[str] = "http_call"
    http_call: HttpCall
    """The request to make."""


class NotifyStep(StepBase):
    """A step that sends a message to a channel."""

    kind: ClassVar[str] = "notify"
    notify: Notify
    """The channel and the message."""


class DelayStep(StepBase):
    """A step that sleeps durably."""

    kind: ClassVar[str] = "delay"
    delay: Delay
    """How long to sleep, or until when."""

    def no_timeout(self) -> str | None:
        return (
            "a delay always waits its full time: a timeout cannot cut it short "
            "(shorten the delay instead)"
        )


class WaitForStep(StepBase):
    """A step that parks the run until an event, a webhook or a decision."""

    kind: ClassVar[str] = "wait_for"
    wait_for: WaitFor
    """What to wait for, how long, and what a timeout or a rejection does."""

    @model_validator(mode="after")
    def _one_timeout(self) -> WaitForStep:
        wait = self.wait_for
        if wait.signal is not None and wait.signal.timeout is not None and self.timeout:
            raise invalid_at(
                self,
                ("timeout",),
                "this wait has a timeout already (wait_for.signal.timeout): give it once, "
                "here or there",
            )
        if self.timeout is not None and wait.timeout is not None:
            raise invalid_at(
                self,
                ("timeout",),
                "this wait has a timeout already (wait_for.timeout): give it once, here or there",
            )
        if (
            "on_timeout" in wait.model_fields_set
            and wait.on_timeout != "fail"
            and self.wait_timeout is None
            and wait.approval is None
        ):
            raise invalid_at(
                self,
                ("wait_for", "on_timeout"),
                "on_timeout needs a timeout (the step's timeout or wait_for.timeout)",
            )
        return self

    def no_timeout_retry(self) -> str | None:
        return "a wait_for's timeout is decided by its on_timeout, never retried (remove retry_on_timeout)"

    @property
    def wait_timeout(self) -> timedelta | None:
        """How long the wait lasts before its ``on_timeout``: ``wait_for.timeout`` (or a
        signal's own ``timeout``) or the step's ``timeout`` (an approval without either
        takes ``config.approval_timeout``)."""
        signal = self.wait_for.signal
        return (
            self.wait_for.timeout
            or (signal.timeout if signal is not None else None)
            or self.timeout
        )


class ChooseStep(StepBase):
    """A step that jumps to another step when a test holds."""

    kind: ClassVar[str] = "choose"
    choose: Choose
    """The branches and the default."""

    def no_timeout(self) -> str | None:
        return "a choose step decides at once and never waits: a timeout cannot apply (remove it)"


class StateSetStep(StepBase):
    """A step that stores values in the workflow's state."""

    kind: ClassVar[str] = "state_set"
    state_set: StateValues
    """Keys of the workflow's state and the values to store (expressions allowed);
    later runs read them as ${{ state.<key> }}."""


class ListAddStep(StepBase):
    """A step that adds a value to a list in the workflow's state."""

    kind: ClassVar[str] = "list_add"
    list_add: ListChange
    """The list and the value to add."""


class ListRemoveStep(StepBase):
    """A step that removes a value from a list in the workflow's state."""

    kind: ClassVar[str] = "list_remove"
    list_remove: ListChange
    """The list and the value to remove."""


class CallWorkflowStep(StepBase):
    """A step that runs another workflow as a child run."""

    kind: ClassVar[str] = "call_workflow"
    call_workflow: CallWorkflow
    """The workflow, its inputs, and whether to wait for the child run."""

    def no_timeout(self) -> str | None:
        if not self.call_workflow.wait:
            return "a call_workflow with wait: false settles at once: a timeout cannot apply"
        return None


class BlockStep(StepBase):
    """A step made of steps (parallel, race, try): each step inside retries, times out
    and runs per item on its own; the block itself does none of these."""

    def no_timeout(self) -> str | None:
        return (
            f"a {self.kind} block has no timeout of its own: give its steps one (or race "
            "it against a delay)"
        )

    @model_validator(mode="after")
    def _not_as_a_whole(self) -> BlockStep:
        if self.retry is not None:
            raise invalid_at(
                self,
                ("retry",),
                f"a {self.kind} block is not retried as a whole: give its steps a retry",
            )
        if self.foreach is not None:
            raise invalid_at(
                self,
                ("foreach",),
                f"a {self.kind} block cannot run per item: put the foreach on a step inside it",
            )
        return self


class ParallelStep(BlockStep):
    """A step whose branches all start together; it ends when every branch has ended."""

    kind: ClassVar[str] = "parallel"
    parallel: list[Step] = Field(min_length=1)
    """The branches, one step each (a block for several); results are
    ${{ steps.<id>.branches.<branch>.output }}. A branch that fails stops the others
    (each releases what it holds) and fails the step, unless it has continue_on_error."""

    def lists(self) -> list[tuple[str, list[Any]]]:
        return [("branch", self.parallel), *super().lists()]


class RaceStep(BlockStep):
    """A step whose branches start together; the first to end wins and the others are
    cancelled (each releases what it holds: a wait, a timer, a send not signed yet)."""

    kind: ClassVar[str] = "race"
    race: list[Step] = Field(min_length=2)
    """The branches, one step each (at least two); ${{ steps.<id>.winner }} names the one
    that ended first, and the step ends as it did (its output, or its failure)."""

    def lists(self) -> list[tuple[str, list[Any]]]:
        return [("branch", self.race), *super().lists()]


class TryStep(BlockStep):
    """A block whose terminal failure is caught: the compensations of the steps that
    completed run in reverse order, then catch, with the failure as data."""

    kind: ClassVar[str] = "try"
    try_: list[Step] = Field(alias="try", min_length=1)
    """The steps of the block, in order; a step here may carry compensate."""
    catch: list[Step] = []
    """Steps that run after the compensations when a step of try fails;
    ${{ steps.<id>.error }} (and ${{ error }}) is the failure. Without catch, the block
    fails with it once the compensations ran."""

    @property
    def action(self) -> Any:
        return self.try_

    def lists(self) -> list[tuple[str, list[Any]]]:
        found: list[tuple[str, list[Any]]] = [("try", self.try_)]
        if self.catch:
            found.append(("catch", self.catch))
        return [*found, *super().lists()]


BLOCK_KINDS = ("parallel", "race", "try")
"""Steps made of steps."""

STEP_CLASSES: tuple[type[StepBase], ...] = (
    SendTransactionStep,
    ReadStep,
    QueryStep,
    CommandStep,
    HttpCallStep,
    NotifyStep,
    DelayStep,
    WaitForStep,
    ChooseStep,
    StateSetStep,
    ListAddStep,
    ListRemoveStep,
    CallWorkflowStep,
    ParallelStep,
    RaceStep,
    TryStep,
)
ACTIONS: tuple[str, ...] = tuple(cls.kind for cls in STEP_CLASSES)
"""The action keys, one of which every step holds."""

Step = Annotated[
    Annotated[SendTransactionStep, Tag("send_transaction")]
    | Annotated[ReadStep, Tag("read")]
    | Annotated[QueryStep, Tag("query")]
    | Annotated[CommandStep, Tag("command")]
    | Annotated[HttpCallStep, Tag("http_call")]
    | Annotated[NotifyStep, Tag("notify")]
    | Annotated[DelayStep, Tag("delay")]
    | Annotated[WaitForStep, Tag("wait_for")]
    | Annotated[ChooseStep, Tag("choose")]
    | Annotated[StateSetStep, Tag("state_set")]
    | Annotated[ListAddStep, Tag("list_add")]
    | Annotated[ListRemoveStep, Tag("list_remove")]
    | Annotated[CallWorkflowStep, Tag("call_workflow")]
    | Annotated[ParallelStep, Tag("parallel")]
    | Annotated[RaceStep, Tag("race")]
    | Annotated[TryStep, Tag("try")],
    Discriminator(
        by_key(*ACTIONS),
        custom_error_type="step_action",
        custom_error_message="a step needs exactly one action",
    ),
]
"""A step: the common fields and exactly one action."""


def walk(steps: list[Any]) -> list[Any]:
    """Every step of ``steps`` and, after each, the steps it holds (branches, try and
    catch, compensations), depth first, in the order they are written."""
    found: list[Any] = []
    stack = list(reversed(steps))
    while stack:
        step = stack.pop()
        found.append(step)
        for _, inner in reversed(step.lists()):
            stack.extend(reversed(inner))
    return found

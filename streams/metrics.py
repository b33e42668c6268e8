"""Prometheus metrics of a worker, served at ``/metrics`` (behind the API token).

Counters and histograms are counted where things happen (the runner); the gauges that
describe shared state (budgets, circuits, sends, gas, dead letters) are read from
Postgres every few seconds, and the ones that describe this worker (lane queues,
consumer lag) from its tables and consumer. Every worker reports the shared gauges:
dashboards take ``max`` over instances.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from rflow.engine.state import RunState
from rflow.streams.loops import every

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

log = logging.getLogger(__name__)
REFRESH_INTERVAL = 5.0
CIRCUIT_STATES = ("closed", "half_open", "open")


@dataclass(frozen=True)
class MetricSpec:
    """One metric as a scraper sees it: its exposed name, type, help and labels."""

    name: str
    type: str
    help: str
    labels: tuple[str, ...]


class ExactGauge:
    """A gauge of whole numbers (wei, raw token units) written out digit for digit.

    prometheus_client keeps every value as a float: it writes ``2e+16`` for 0.02 ether in
    wei, and 1 ether and 1 wei (``1000000000000000001``) as ``1e+18``. An amount read
    from ``/metrics`` must be the amount; Prometheus reads the digits as any number.
    """

    def __init__(self, name: str, documentation: str, labelnames: list[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.values: dict[tuple[str, ...], int] = {}

    def labels(self, *values: str) -> _ExactChild:
        """The series of ``values`` (one per label name)."""
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {', '.join(self.labelnames)}")
        return _ExactChild(self, tuple(str(v) for v in values))

    def render(self) -> str:
        """The gauge in Prometheus's text exposition format."""
        help_text = self.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        lines = [f"# HELP {self.name} {help_text}", f"# TYPE {self.name} gauge"]
        for values, value in sorted(self.values.items()):
            labels = ",".join(
                f'{name}="{_escape(v)}"' for name, v in zip(self.labelnames, values, strict=True)
            )
            lines.append(f"{self.name}{{{labels}}} {value}")
        return "\n".join(lines) + "\n"


class _ExactChild:
    """One series of an :class:`ExactGauge`."""

    def __init__(self, gauge: ExactGauge, values: tuple[str, ...]) -> None:
        self.gauge = gauge
        self.values = values

    def set(self, value: int | Decimal) -> None:
        """Set the series to the whole number ``value`` (a fraction is refused, not cut)."""
        if isinstance(value, bool) or int(value) != value:
            raise ValueError(f"{self.gauge.name} holds whole numbers, got {value!r}")
        self.gauge.values[self.values] = int(value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Children:
    """A metric's children kept by their label values: prometheus_client takes a lock
    and checks the values each time ``labels`` is called, on the run path several times
    a run."""

    def labels(self, *values: str) -> Any:
        children = self.__dict__.setdefault("_rflow_children", {})
        child = children.get(values)
        if child is None:
            child = children[values] = super().labels(*values)  # type: ignore[misc]
        return child


class _Counter(_Children, Counter):
    pass


class _Gauge(_Children, Gauge):
    pass


class _Histogram(_Children, Histogram):
    pass


class Metrics:
    """One worker's metrics, in a registry of its own (amounts in :class:`ExactGauge`);
    :attr:`specs` lists them all (``docs/metrics.md`` is generated from it)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._step_kinds: dict[int, tuple[Any, dict[str, str]]] = {}
        self.specs: list[MetricSpec] = []
        self.triggers = self._counter(
            "rflow_triggers",
            "Trigger firings admitted, by workflow and source",
            "workflow",
            "source",
        )
        self.refused_firings = self._counter(
            "rflow_refused_firings",
            "Records on the triggers topic the worker does not believe or accept, dead-lettered "
            "before admission: by reason (unauthenticated_source: a claim of rflow's ingress "
            "without its valid proof; not_accepted, invalid_input, reserved_key: an outside "
            "firing its workflow does not take) and by the source claimed (or the record's "
            "kind)",
            "reason",
            "source",
        )
        self.handler_failures = self._counter(
            "rflow_handler_failures",
            "Records an agent's handler raised on, dead-lettered with the reason so that "
            "their partition's commits go on, by agent",
            "agent",
        )
        self.partition_stalls = self._counter(
            "rflow_partition_stalls",
            "Times a partition had records waiting past what was taken and none was taken "
            "for a while (it is then read again), by topic and partition",
            "topic",
            "partition",
        )
        self.runs_started = self._counter(
            "rflow_runs_started", "Runs started, by workflow", "workflow"
        )
        self.runs_settled = self._counter(
            "rflow_runs_settled", "Runs settled, by workflow and status", "workflow", "status"
        )
        self.events_dropped = self._counter(
            "rflow_run_events_dropped",
            "Run events dropped, by reason: unknown_run (the run is neither live nor settled "
            "within the de-duplication window) or forgotten_start (a start whose firing is "
            "no longer remembered); nothing is restarted",
            "reason",
        )
        self.forgotten = self._counter(
            "rflow_forgotten",
            "Table entries deleted (a tombstone each) by table: triggers and settled past "
            "their de-duplication window, runs moved to settled",
            "table",
        )
        self.sweeps = self._counter(
            "rflow_sweeps",
            "Sweeps of this worker's partitions completed (each one forgets what the "
            "de-duplication window no longer covers)",
        )
        self.remembered = self._gauge(
            "rflow_remembered",
            "Entries this worker's tables hold for its partitions, by table, as counted by "
            "the last full sweep of each (when the worker opened it, then daily)",
            "table",
        )
        self.changelog_read = self._gauge(
            "rflow_changelog_records_read",
            "Changelog records this worker applied to its tables since it started (recovering "
            "them, or keeping standby copies), by table: a worker restarted with its data "
            "directory reads only the records it had not seen",
            "table",
        )
        self.step_duration = self._histogram(
            "rflow_step_duration_seconds",
            "Time from a step's start to its settling, by kind",
            "kind",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )
        self.retries = self._counter(
            "rflow_step_retries", "Step attempts retried, by failure kind", "kind"
        )
        self.deferrals = self._counter(
            "rflow_start_deferrals",
            "Run starts deferred, by workflow and reason "
            "(rate_limit, or waiting behind a half-open circuit's probe)",
            "workflow",
            "reason",
        )
        self.lane_waiting = self._gauge(
            "rflow_lane_waiting",
            "Runs waiting in concurrency lanes on this worker, by workflow",
            "workflow",
        )
        self.lane_owner_quiet = self._gauge(
            "rflow_lane_owner_quiet_seconds",
            "Of the lanes on this worker with runs waiting, the longest a lane's owner run "
            "has gone without its state changing, by workflow (0 when no lane has runs "
            "waiting)",
            "workflow",
        )
        self.circuit = self._gauge(
            "rflow_circuit_state",
            "1 for each workflow's circuit breaker state",
            "workflow",
            "state",
        )
        self.budget_cap = self._exact(
            "rflow_budget_cap", "Budget caps (raw units)", "budget", "asset"
        )
        self.budget_consumed = self._exact(
            "rflow_budget_consumed",
            "Reserved and spent in the budget's window (raw units)",
            "budget",
            "asset",
        )
        self.budget_remaining = self._exact(
            "rflow_budget_remaining", "Cap minus consumed (raw units)", "budget", "asset"
        )
        self.sends = self._gauge(
            "rflow_sends", "Sends recorded by the relayer, by status", "status"
        )
        self.gas_spent = self._exact(
            "rflow_gas_spent_wei",
            "Gas paid by sends (gas used x effective price), in wei",
            "network",
            "relayer",
        )
        self.consumer_lag = self._gauge(
            "rflow_consumer_lag",
            "Records not yet committed, by topic and partition",
            "topic",
            "partition",
        )
        self.backlog = self._gauge(
            "rflow_runs_backlog",
            "Runs admitted but not started (pending, by reason: lane, rate_limit, paused, "
            "probe, matrix) and runs parked in an approval, a wait or a delay (waiting)",
            "workflow",
            "status",
            "reason",
        )
        self.backlog_seen: set[tuple[str, str, str]] = set()
        self.dead_letters = self._gauge(
            "rflow_dead_letters", "Dead-lettered records and runs", "kind"
        )
        self.rpc_calls = self._counter(
            "rflow_rpc_calls",
            "Requests to JSON-RPC endpoints, by network, endpoint and outcome (ok, error: "
            "the node answered with an error, unavailable: no answer)",
            "network",
            "endpoint",
            "outcome",
        )
        self.rpc_latency = self._histogram(
            "rflow_rpc_latency_seconds",
            "Time a JSON-RPC endpoint took to answer a request (or fail), by network and endpoint",
            "network",
            "endpoint",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.rpc_breaker = self._gauge(
            "rflow_rpc_breaker_state",
            "1 for each JSON-RPC endpoint's breaker state (closed, half_open, open)",
            "network",
            "endpoint",
            "state",
        )
        self.rpc_lag = self._gauge(
            "rflow_rpc_lag_blocks",
            "Blocks a JSON-RPC endpoint's head is behind the best endpoint's of its network",
            "network",
            "endpoint",
        )
        self.approvals_pending = self._gauge(
            "rflow_approvals_pending",
            "Approvals waiting for a decision, by workflow and priority",
            "workflow",
            "priority",
        )

    def rpc_called(self, network: str, endpoint: str, outcome: str, seconds: float) -> None:
        """One request to a JSON-RPC endpoint (:class:`~rflow.ingress.pool.Observer`)."""
        self.rpc_calls.labels(network, endpoint, outcome).inc()
        self.rpc_latency.labels(network, endpoint).observe(seconds)

    def rpc_health(self, network: str, endpoint: str, breaker: str, lag: int | None) -> None:
        """An endpoint's breaker state and lag (:class:`~rflow.ingress.pool.Observer`)."""
        for state in CIRCUIT_STATES:
            self.rpc_breaker.labels(network, endpoint, state).set(1 if state == breaker else 0)
        if lag is not None:
            self.rpc_lag.labels(network, endpoint).set(lag)

    def _counter(self, name: str, help: str, *labels: str) -> Counter:
        self.specs.append(MetricSpec(name + "_total", "counter", help, labels))
        return _Counter(name, help, labels, registry=self.registry)

    def _gauge(self, name: str, help: str, *labels: str) -> Gauge:
        self.specs.append(MetricSpec(name, "gauge", help, labels))
        return _Gauge(name, help, labels, registry=self.registry)

    def _histogram(
        self, name: str, help: str, *labels: str, buckets: tuple[float, ...]
    ) -> Histogram:
        self.specs.append(MetricSpec(name, "histogram", help, labels))
        return _Histogram(name, help, labels, registry=self.registry, buckets=buckets)

    def _exact(self, name: str, help: str, *labels: str) -> ExactGauge:
        self.specs.append(MetricSpec(name, "gauge", help, labels))
        return ExactGauge(name, help, list(labels))

    @property
    def exact(self) -> tuple[ExactGauge, ...]:
        """The gauges of amounts, written digit for digit."""
        return (self.budget_cap, self.budget_consumed, self.budget_remaining, self.gas_spent)

    def render(self) -> bytes:
        """Every metric in Prometheus's text exposition format."""
        exact = "".join(gauge.render() for gauge in self.exact)
        return generate_latest(self.registry) + exact.encode()

    def journaled(self, workflow: Any, name: str, state: Any, entries: list[Any]) -> None:
        """Count what one decision of the engine journaled."""
        for entry in entries:
            event = entry.event
            if event == "run_started":
                self.runs_started.labels(name).inc()
            elif event == "run_settled":
                self.runs_settled.labels(name, entry.status).inc()
            elif event == "step_retrying":
                kind = (entry.data.get("error") or {}).get("kind", "unknown")
                self.retries.labels(kind).inc()
            elif event == "step_settled" and state is not None and entry.path in state.steps:
                record = state.steps[entry.path]
                if record.started_at is not None and record.settled_at is not None:
                    kind = self._kinds(workflow).get(record.step, "unknown")
                    seconds = (record.settled_at - record.started_at).total_seconds()
                    self.step_duration.labels(kind).observe(max(seconds, 0.0))

    def _kinds(self, workflow: Any) -> dict[str, str]:
        """Each step id of ``workflow`` (a definition, immutable) -> its kind."""
        found = self._step_kinds.get(id(workflow))
        if found is None or found[0] is not workflow:
            if len(self._step_kinds) >= 1024:
                self._step_kinds.clear()
            kinds = {step.id: step.kind for step in workflow.all_steps()}
            found = self._step_kinds[id(workflow)] = (workflow, kinds)
        return found[1]


async def refresh(app: RflowApp, metrics: Metrics) -> None:
    """Read the gauges: shared state from Postgres, lanes and lag from this worker."""
    from rflow.approvals import PRIORITIES
    from rflow.storage import budgets, circuits, dead_letters, runs, sends, waits

    runtime = app.rflow
    project = runtime.project
    declared = project.budgets if project else {}

    async def shared(conn: Any) -> tuple[Any, ...]:
        usage = await budgets.usage(conn, declared) if declared else []
        return (
            usage,
            await circuits.circuits(conn),
            await sends.count_by_status(conn),
            await budgets.spend(conn, window=None),
            await dead_letters.counts(conn),
            await waits.pending_approval_counts(conn),
            await runs.backlog(conn),
        )

    usage, found, by_status, spent, dead, pending, backlog = await runtime.database.run(
        shared, what="metrics"
    )
    for row in usage:
        metrics.budget_cap.labels(row.budget, row.asset).set(row.cap)
        metrics.budget_consumed.labels(row.budget, row.asset).set(row.consumed)
        metrics.budget_remaining.labels(row.budget, row.asset).set(row.remaining)
    guarded = [n for n, w in (project.workflows.items() if project else []) if w.circuit_breaker]
    for name in guarded:
        current = found[name].state if name in found else "closed"
        for state in CIRCUIT_STATES:
            metrics.circuit.labels(name, state).set(1 if state == current else 0)
    for status in sends.STATUSES:
        metrics.sends.labels(status).set(by_status.get(status, 0))
    for row in spent:
        metrics.gas_spent.labels(row.network, row.relayer).set(row.gas_cost)
    for kind in ("record", "run"):
        metrics.dead_letters.labels(kind).set(dead.get(kind, 0))
    with_approvals = {
        name
        for name, workflow in (project.workflows.items() if project else [])
        if any(s.kind == "wait_for" and s.wait_for.approval for s in workflow.all_steps())
    }
    for name in with_approvals | {name for name, _ in pending}:
        for priority in PRIORITIES:
            metrics.approvals_pending.labels(name, priority).set(pending.get((name, priority), 0))
    counts = {(workflow, status, reason): count for workflow, status, reason, count in backlog}
    for labels in metrics.backlog_seen - counts.keys():
        metrics.backlog.labels(*labels).set(0)  # emptied: it reads 0, not its last count
    for labels, count in counts.items():
        metrics.backlog.labels(*labels).set(count)
    metrics.backlog_seen |= counts.keys()

    waiting: dict[str, int] = {name: 0 for name in (project.workflows if project else {})}
    quiet: dict[str, float] = dict.fromkeys(waiting, 0.0)
    now = datetime.now(UTC)
    tables = runtime.tables
    for partition in sorted(runtime.consumption.owned()):
        for key, lane in list(tables.lanes.items([partition])):
            if key.startswith("~"):
                continue  # firings held while a workflow is paused: counted from the read model
            workflow = key.split(":", 1)[0]
            waiting[workflow] = waiting.get(workflow, 0) + len(lane.queue)
            if lane.queue and lane.active is not None:
                seconds = _quiet_for(tables.runs, partition, lane.active, now)
                quiet[workflow] = max(quiet.get(workflow, 0.0), seconds)
    for workflow, count in waiting.items():
        metrics.lane_waiting.labels(workflow).set(count)
        metrics.lane_owner_quiet.labels(workflow).set(quiet.get(workflow, 0.0))

    for name in ("triggers", "runs", "settled", "lanes"):
        metrics.changelog_read.labels(name).set(getattr(runtime.tables, name).store.read)

    consumer = app.consumer
    for tp, done in runtime.consumption.committed().items():
        highwater = consumer.highwater(tp)
        if highwater is None:
            continue
        metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(max(highwater - done, 0))


def _quiet_for(runs: Any, partition: int, run_id: str, now: datetime) -> float:
    """Seconds since run ``run_id``'s state last changed, read on ``partition`` (a lane's
    owner is decided on the lane's partition); 0 when it is not there or cannot be read:
    one unreadable entry must not keep the other gauges from being set."""
    try:
        owner = runs.get_in(partition, run_id)
        if not isinstance(owner, RunState):
            return 0.0
        return max((now - owner.updated_at).total_seconds(), 0.0)
    except Exception as exc:
        log.warning("metrics: the state of lane owner %s could not be read: %r", run_id, exc)
        return 0.0


def attach(app: RflowApp) -> Metrics:
    """Give ``app`` its metrics and the loop that refreshes the gauges."""
    metrics = Metrics()
    consumption = app.rflow.consumption
    if consumption is not None:
        consumption.on_handler_failure.append(
            lambda agent: metrics.handler_failures.labels(agent).inc()
        )
        consumption.on_stall.append(
            lambda tp: metrics.partition_stalls.labels(tp.topic, str(tp.partition)).inc()
        )

    @every(app, REFRESH_INTERVAL, "rflow.metrics")
    async def refresh_gauges() -> None:
        """Refresh the gauges that describe state rather than count events."""
        if app.rebalancing or app.in_recovery:
            return
        try:
            await refresh(app, metrics)
        except Exception as exc:  # metrics must never take the worker down
            log.warning("metrics refresh failed: %r", exc)

    return metrics

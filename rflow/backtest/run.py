"""One backtest from start to end: the two projects, the history, both replays, the report.

:func:`backtest` never raises for what a user can get wrong or a service can do: a
candidate with errors, nothing deployed, Kafka or Postgres or a node unreachable all
give a report with ``outcome: failed`` and the reason (exit status 2).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rflow.backtest import diff
from rflow.backtest.chain import Chain, ChainError
from rflow.backtest.history import History, Window
from rflow.backtest.load import LoadError, load
from rflow.backtest.outcome import Outcome
from rflow.backtest.sandbox import Sandbox
from rflow.backtest.simulate import Assume
from rflow.codecs.backtests import BacktestReport
from rflow.lang.model import Project
from rflow.settings import Settings


@dataclass(frozen=True)
class Request:
    """What to backtest."""

    candidate: Path
    window: Window
    workflows: tuple[str, ...] = ()
    limit: int | None = None
    fork_url: str | None = None
    assume: Assume | None = None
    live_http: bool = False

    def options(self) -> dict[str, Any]:
        """The options as the report keeps them (a fork URL, which may carry a key, as
        whether there was one)."""
        return {
            "limit": self.limit,
            "fork": self.fork_url is not None,
            "assume": self.assume,
            "live_http": self.live_http,
        }


class Refused(Exception):
    """The backtest cannot run; the message says why."""


@dataclass
class Projects:
    """The deployed project and the candidate, with what the report says of them."""

    deployed: Project
    candidate: Project
    deployment: int | None = None
    digest: str | None = None


async def backtest(
    settings: Settings,
    request: Request,
    env: Mapping[str, str],
    conn: Any,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> BacktestReport:
    """Replay the window's firings through the deployed version and the candidate."""
    started = now()
    base = {
        "candidate": str(request.candidate),
        "started_at": started,
        "window_from": request.window.start,
        "window_to": request.window.end,
        "workflows": list(request.workflows),
        "options": request.options(),
    }
    try:
        projects = await _projects(conn, request.candidate, env)
        base.update(deployment=projects.deployment, digest=projects.digest)
        names = _workflows(projects, request.workflows)
        base["workflows"] = sorted(names)
        history = await load(
            settings,
            conn,
            request.window,
            workflows=frozenset(names),
            limit=request.limit,
            lookback=_lookback(projects),
        )
        async with Chain(
            settings, [projects.candidate, projects.deployed], env, fork_url=request.fork_url
        ) as chain:
            fetch = _fetcher() if request.live_http else None
            try:
                return await _replayed(
                    base, history, projects, chain, env, request, fetch, started, now
                )
            finally:
                if fetch is not None:
                    await fetch.close()
    except (Refused, LoadError, ChainError) as exc:
        return BacktestReport(**base, finished_at=now(), outcome="failed", reason=str(exc))
    except Exception as exc:
        from rflow.storage import StorageError

        if isinstance(exc, StorageError):
            return BacktestReport(
                **base, finished_at=now(), outcome="failed", reason=f"the database: {exc}"
            )
        raise


async def _replayed(
    base: dict[str, Any],
    history: History,
    projects: Projects,
    chain: Chain,
    env: Mapping[str, str],
    request: Request,
    fetch: Any,
    started: datetime,
    now: Callable[[], datetime],
) -> BacktestReport:
    old, new = await replay(
        history,
        projects,
        chain,
        env,
        assume=request.assume,
        live_http=request.live_http,
        fetch=fetch,
    )
    return report(base, history, projects, old, new, now())


async def replay(
    history: History,
    projects: Projects,
    chain: Any,
    env: Mapping[str, str],
    *,
    assume: Assume | None = None,
    live_http: bool = False,
    fetch: Any = None,
) -> tuple[dict[str, Outcome], dict[str, Outcome]]:
    """Both replays of ``history``: the deployed version's, then the candidate's (one
    firing's block found once, for both)."""
    common: dict[str, Any] = {
        "assume": assume,
        "live_http": live_http,
        "fetch": fetch,
        "blocks": {},
    }
    old = await Sandbox("deployed", projects.deployed, history, chain, env, **common).replay()
    new = await Sandbox("candidate", projects.candidate, history, chain, env, **common).replay()
    return old, new


def report(
    base: dict[str, Any],
    history: History,
    projects: Projects,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    finished: datetime,
) -> BacktestReport:
    """The report of two replays of ``history``."""
    runs = []
    for rid in [*old, *(r for r in new if r not in old)]:
        before, after = old.get(rid), new.get(rid)
        found = diff.diff_run(rid, before, after, diff.marks_of(before, after))
        if found is not None:
            runs.append(found)
    runs.sort(key=lambda r: (r.fired_at, r.run_id))
    from rflow.engine.keys import workflow_version

    drifts = []
    for rid, outcome in old.items():
        recorded = history.recorded(outcome.firing, rid)
        deployed = projects.deployed.workflows.get(outcome.workflow)
        version = workflow_version(deployed) if deployed is not None else None
        if recorded is not None:
            found = diff.drift(outcome, recorded, version)
            if found is not None:
                drifts.append(found)
    firings = Counter(f.record.workflow for f in history.firings)
    spend = diff.spend(old, new)
    moved = diff.moved(old, new)
    marks = Counter(diff.mark_counts(old.values())) + Counter(diff.mark_counts(new.values()))
    marks["drift"] += len(drifts)
    money = any(r.money for r in runs) or any(row.old != row.new for row in (*spend, *moved))
    different = bool(runs) or money
    return BacktestReport(
        **base,
        finished_at=finished,
        outcome="different" if different else "same",
        firings=len(history.firings),
        from_topic=sum(1 for f in history.firings if f.origin == "topic"),
        from_read_model=sum(1 for f in history.firings if f.origin == "read_model"),
        money_moves=money,
        summary=diff.summarize(base["workflows"], firings, old, new, runs),
        spend=spend,
        moved=moved,
        runs=runs,
        marks=dict(sorted((k, v) for k, v in marks.items() if v)),
        drift=drifts[:DRIFTS_SHOWN],
        notes=list(history.notes)
        + (
            [f"{len(drifts)} runs drift; the first {DRIFTS_SHOWN} are listed"]
            if len(drifts) > DRIFTS_SHOWN
            else []
        ),
    )


DRIFTS_SHOWN = 50


async def _projects(conn: Any, candidate: Path, env: Mapping[str, str]) -> Projects:
    from rflow.lang import ProjectSource, read_source
    from rflow.storage import deployments

    try:
        source, checked = read_source(candidate, env)
    except FileNotFoundError as exc:
        raise Refused(f"the candidate: {exc}") from None
    if checked.project is None or not checked.ok:
        problems = "; ".join(str(d) for d in checked.errors[:5])
        raise Refused(f"the candidate at {candidate} has errors: {problems}")
    latest = await deployments.latest_id(conn)
    stored = await deployments.get(conn, latest) if latest is not None else None
    if stored is None:
        raise Refused(
            "nothing is deployed yet, so there is no version to compare with: deploy first "
            "(rflow deploy PATH)"
        )
    loaded = ProjectSource.from_document(stored.source).validate(env)
    if loaded.project is None or not loaded.ok:
        problems = "; ".join(str(d) for d in loaded.errors[:5])
        raise Refused(f"deployment {stored.id} does not load in this environment: {problems}")
    return Projects(loaded.project, checked.project, stored.id, source.digest)


def _workflows(projects: Projects, asked: tuple[str, ...]) -> set[str]:
    known = set(projects.deployed.workflows) | set(projects.candidate.workflows)
    if not asked:
        return known
    unknown = sorted(set(asked) - known)
    if unknown:
        raise Refused(
            f"no workflow {', '.join(map(repr, unknown))} in the candidate or the deployed "
            f"project (they have: {', '.join(sorted(known)) or 'none'})"
        )
    return set(asked)


def _lookback(projects: Projects) -> timedelta:
    """The longest window a budget of either project counts over."""
    windows = [
        budget.window
        for project in (projects.deployed, projects.candidate)
        for budget in project.budgets.values()
    ]
    return max(windows, default=timedelta(0))


class _Fetcher:
    """The GETs of ``--live-http``: one session, answers shaped as an http_call's output."""

    def __init__(self) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))

    async def __call__(self, url: str, headers: Mapping[str, str]) -> dict[str, Any]:
        import aiohttp

        from rflow.codecs import json
        from rflow.failures import FailureKind, RflowError

        try:
            async with self._session.get(url, headers=dict(headers), allow_redirects=False) as r:
                raw = await r.content.read(1 << 20)
                output: dict[str, Any] = {
                    "status": r.status,
                    "body": raw.decode("utf-8", "replace"),
                    "headers": dict(r.headers),
                }
                if r.content_type == "application/json":
                    try:
                        output["json"] = json.loads(raw)
                    except json.JSONDecodeError:
                        output["json"] = None
                return output
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise RflowError(FailureKind.DATA_UNAVAILABLE, f"GET {url}: {exc}") from None

    async def close(self) -> None:
        await self._session.close()


def _fetcher() -> _Fetcher:
    return _Fetcher()


Fetch = Callable[[str, Mapping[str, str]], Awaitable[dict[str, Any]]]

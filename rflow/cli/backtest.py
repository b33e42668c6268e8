"""``rflow backtest``: replay a window's real firings through a candidate project, beside
the deployed version, in a sandbox; report what the candidate would do differently."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rflow.cli import main
from rflow.cli.common import needs
from rflow.settings import Settings, environ

if TYPE_CHECKING:
    from rflow.codecs.backtests import BacktestReport


def window_options(function: Any) -> Any:
    """``--since`` / ``--from`` / ``--to``: the window of firings a backtest replays."""
    for option in reversed(
        [
            click.option(
                "--since",
                default=None,
                metavar="DURATION",
                help="Replay the firings received this long before now (7d, 36h). Default: 7d.",
            ),
            click.option(
                "--from",
                "start",
                default=None,
                metavar="T",
                help="Replay the firings received at or after T (ISO 8601; UTC unless it "
                "gives a zone).",
            ),
            click.option(
                "--to", "end", default=None, metavar="T", help="...and before T (default: now)."
            ),
        ]
    ):
        function = option(function)
    return function


@main.command("backtest")
@click.argument("project_dir", type=click.Path(path_type=Path))
@click.option(
    "--workflow",
    "workflows",
    multiple=True,
    metavar="W",
    help="Replay only workflow W (repeat for more). Default: every workflow of the "
    "candidate or the deployed project.",
)
@window_options
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Replay at most N firings: the most recent of the window.",
)
@click.option(
    "--fork-url",
    default=None,
    metavar="URL",
    help="Simulate sends, reads and queries on an anvil fork of URL reset to each "
    "firing's block (for a network whose chain id is the URL's), instead of asking the "
    "network's own nodes.",
)
@click.option(
    "--assume",
    type=click.Choice(["approve", "reject", "timeout"]),
    default=None,
    help="How a wait or approval the original run never got an answer to is answered "
    "(default: no answer, its timeout applies).",
)
@click.option(
    "--live-http",
    is_flag=True,
    help="Send for real the HTTP GETs the original runs never made (never another "
    "method), instead of stopping the run there.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (for CI).")
@needs("backtests.run")
def backtest(
    project_dir: Path,
    workflows: tuple[str, ...],
    since: str | None,
    start: str | None,
    end: str | None,
    limit: int | None,
    fork_url: str | None,
    assume: str | None,
    live_http: bool,
    as_json: bool,
) -> None:
    """Replay retained firings through the candidate in PROJECT_DIR, beside the deployed
    version, in a sandbox, and report what the candidate would do differently.

    Every firing of the window (the triggers topic, and the read model for those the
    topic no longer keeps) runs through both versions with the workers' own engine;
    sends are simulated at the firing's block and never signed; HTTP calls and
    notifications take the original run's answers; budgets, permissions, rate limits
    and concurrency are the version's own, against a copy of the window's real spend.
    Nothing is written but the report (kept for the console's Backtests page).

    The report: a summary per workflow, the spend per budget and what moves per
    relayer (deployed → candidate), then each run that differs. Exits 0 when nothing
    differs, 1 when something does, 2 when the backtest could not run (with the reason).
    """
    report, _ = perform(
        project_dir,
        workflows=workflows,
        since=since,
        start=start,
        end=end,
        limit=limit,
        fork_url=fork_url,
        assume=assume,
        live_http=live_http,
    )
    show(report, as_json)
    sys.exit(report.exit_status)


def show(report: BacktestReport, as_json: bool) -> None:
    """Print ``report`` as text or JSON; a failure's reason goes to stderr too."""
    from rflow.backtest.report import text
    from rflow.codecs import json

    if as_json:
        click.echo(json.pretty(report.document()))
    else:
        click.echo(text(report))
    if report.outcome == "failed" and as_json:
        click.echo(f"error: {report.reason}", err=True)


def perform(
    project_dir: Path,
    *,
    workflows: tuple[str, ...] = (),
    since: str | None = None,
    start: str | None = None,
    end: str | None = None,
    limit: int | None = None,
    fork_url: str | None = None,
    assume: str | None = None,
    live_http: bool = False,
    settings: Settings | None = None,
) -> tuple[BacktestReport, int | None]:
    """Run one backtest and keep its report; the report and its id (``None`` when it
    could not be kept)."""
    from rflow.backtest.history import WindowError, window
    from rflow.backtest.run import Request
    from rflow.codecs.backtests import BacktestReport

    now = datetime.now(UTC)
    try:
        span = window(since=since, start=start, end=end, now=now)
    except WindowError as exc:
        report = BacktestReport(
            candidate=str(project_dir),
            started_at=now,
            finished_at=now,
            window_from=now,
            window_to=now,
            outcome="failed",
            reason=str(exc),
        )
        return report, None
    request = Request(
        candidate=project_dir,
        window=span,
        workflows=tuple(workflows),
        limit=limit,
        fork_url=fork_url,
        assume=assume,  # type: ignore[arg-type]
        live_http=live_http,
    )
    return asyncio.run(_perform(settings or Settings.from_env(), request))


async def _perform(settings: Settings, request: Any) -> tuple[BacktestReport, int | None]:
    from rflow import storage
    from rflow.backtest.run import backtest as run
    from rflow.codecs.backtests import BacktestReport
    from rflow.storage import backtests

    started = datetime.now(UTC)
    try:
        conn = await storage.connect(settings)
    except storage.StorageError as exc:
        return (
            BacktestReport(
                candidate=str(request.candidate),
                started_at=started,
                finished_at=datetime.now(UTC),
                window_from=request.window.start,
                window_to=request.window.end,
                options=request.options(),
                outcome="failed",
                reason=f"the database: {exc}",
            ),
            None,
        )
    async with conn:
        report = await run(settings, request, environ(), conn)
        try:
            stored = await backtests.store(conn, row_of(report))
        except storage.StorageError as exc:
            click.echo(f"warning: the report could not be kept for the console: {exc}", err=True)
            stored = None
    return report, stored


def row_of(report: BacktestReport) -> dict[str, Any]:
    """The ``backtests`` row of ``report``."""
    return {
        "started_at": report.started_at,
        "finished_at": report.finished_at,
        "candidate": report.candidate,
        "digest": report.digest,
        "deployment": report.deployment,
        "window_from": report.window_from,
        "window_to": report.window_to,
        "workflows": report.workflows,
        "outcome": report.outcome,
        "firings": report.firings,
        "differing": len(report.runs),
        "money_moves": report.money_moves,
        "reason": report.reason,
        "report": report.document(),
    }

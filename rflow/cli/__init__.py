"""The ``rflow`` command line.

Each command group lives in its own module. :data:`main` knows every command's name,
module and one-line help without importing it; a command's module (and what it needs:
the engine, Kafka clients, web3) is imported only when that command runs, so ``--help``
and ``--version`` answer at once.
"""

from __future__ import annotations

import importlib

import click

from rflow import __version__

COMMANDS: dict[str, tuple[str, str]] = {
    "approvals": ("approvals", "Approvals: the inbox of pending decisions, and answering them."),
    "audit": ("audit", "The audit trail: operator actions taken and attempts refused."),
    "backtest": (
        "backtest",
        "Replay retained firings through a candidate project beside the deployed one.",
    ),
    "budgets": ("budgets", "Durable spend budgets: their caps and what the window has used."),
    "dead-letters": ("dead_letters", "Dead-lettered records: list them, show one, replay one."),
    "deploy": ("deploy", "Validate the project at PATH, then publish it as the new deployment."),
    "deployments": ("deploy", "The newest deployments, and which one each worker runs."),
    "dev": ("dev", "Helpers for the local chain: rflow dev emit asks the example contract to pay."),
    "doctor": ("doctor", "Validate PATH, then check Kafka, Postgres, RPCs, relayer and more."),
    "keys": ("keys", "Relayer keys: make one inside a PKCS#11 token, ask a signer its address."),
    "kafka": ("ops", "Kafka security: the ACLs rflow's principals need."),
    "migrate": ("ops", "Apply the database migrations (idempotent)."),
    "run": ("run", "Start a run of WORKFLOW through its manual trigger."),
    "runs": ("runs", "Runs: their status, journals, approvals and cancellation."),
    "schedules": ("schedules", "Schedules: next and last fires, failures; disable and enable."),
    "schema": ("validate", "Print the JSON Schema of workflow files (for editor completion)."),
    "sends": ("sends", "Pending transactions: list them, speed one up, cancel one."),
    "spend": ("budgets", "Gas paid and native value moved by rflow's sends, per workflow."),
    "state": ("state", "A workflow's durable state, as its steps left it (read only)."),
    "topics": ("ops", "Kafka topics declared in topics.yaml."),
    "trigger": ("trigger", "Produce a trigger record for WORKFLOW with --input as its payload."),
    "validate": ("validate", "Check the workflow files at PATH (a file or a folder)."),
    "worker": ("ops", "Run a worker for the workflows in PROJECT."),
    "workers": ("workers", "Each worker, the partitions it owns and the standby copies it keeps."),
    "workflow": ("workflows", "Workflows: list them, pause and resume them."),
}
"""Each top-level command: the module under ``rflow.cli`` that defines it, its short help."""


class LazyGroup(click.Group):
    """A group whose commands are imported from their module when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(f"rflow.cli.{COMMANDS[cmd_name][0]}")
        return self.commands.get(cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib  # only a mistyped command needs it

            near = difflib.get_close_matches(name, self.list_commands(ctx), n=1)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            ctx.fail(f"no such command '{name}'{hint}")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        from rflow.settings import SettingsError

        try:
            return super().invoke(ctx)
        except SettingsError as exc:
            # Exit 2 like any bad input to a command, with the variables to fix.
            click.echo(f"error: the environment's settings: {exc}", err=True)
            ctx.exit(2)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rflow")
def main() -> None:
    """rflow: when this happens, do these things, in order."""
    _scrub_logs()


def _scrub_logs() -> None:
    """Scrub every log line of this command of the secret-bearing settings (the RPC URLs,
    the database URL, the tokens): what a library logs must not show them either."""
    from pydantic import ValidationError

    from rflow.secrets import process_secrets, scrub_logs
    from rflow.settings import Settings, environ

    env = environ()
    try:
        settings = Settings.from_env(env)
    except ValidationError:  # the command itself reports bad settings when it reads them
        return
    scrub_logs(process_secrets(settings, None, env))

"""``rflow workers``: each worker of the consumer group, the partitions it owns and the
standby copies it keeps, per topic."""

from __future__ import annotations

import asyncio
import json

import click

from rflow.cli import main
from rflow.cli.common import needs, table, with_database
from rflow.settings import Settings


@main.command("workers")
@click.option(
    "--group",
    default=None,
    help="The consumer group (the workers' RFLOW_APP_ID); default: $RFLOW_APP_ID.",
)
@click.option("--json", "as_json", is_flag=True)
@needs("runs.read")
def list_workers(group: str | None, as_json: bool) -> None:
    """Each worker of the consumer group: its name (host:web port) and Kafka client id,
    whether Kafka lists it as a member now, the deployment it runs, and per topic the
    partitions it owns and the standby copies of tables it keeps."""
    from rflow import workers
    from rflow.storage import deployments
    from rflow.streams.topics import TopicsError, group_members

    settings = Settings.from_env()
    group = group or settings.app_id
    rows = [
        row
        for row in asyncio.run(with_database(deployments.workers, settings))
        if row.app_id == group
    ]
    try:
        members: list[dict[str, str]] | None = asyncio.run(group_members(settings, group))
        kafka_note = None
    except TopicsError as exc:
        members, kafka_note = None, str(exc)
    listed = {member["client_id"] for member in members or ()}
    found = []
    for row in rows:
        in_group = None if members is None else row.client_id in listed
        gone = in_group is False or row.seen_ago > workers.STALE_AFTER
        held = row.assignment or {}
        found.append(
            {
                "worker": row.worker,
                "client_id": row.client_id,
                "group": row.app_id,
                "in_group": in_group,
                "deployment": row.deployment,
                "seen_ago": round(row.seen_ago, 1),
                "gone": gone,
                "owns": held.get("actives", {}),
                "standby": held.get("standbys", {}),
            }
        )
    strangers = sorted(listed - {row.client_id for row in rows})
    if as_json:
        document = {"group": group, "workers": found, "other_members": strangers}
        if kafka_note:
            document["kafka"] = kafka_note
        click.echo(json.dumps(document, indent=2))
        return
    if not found:
        click.echo(f"no worker of group {group!r} has reported (RFLOW_APP_ID={group})")
    else:
        click.echo(
            table(
                [
                    [
                        w["worker"],
                        w["client_id"] or "-",
                        {True: "yes", False: "no", None: "?"}[w["in_group"]],
                        w["deployment"] if w["deployment"] is not None else "-",
                        f"{w['seen_ago']:.0f} s ago" + (" (gone)" if w["gone"] else ""),
                    ]
                    for w in found
                ],
                ["WORKER", "KAFKA CLIENT ID", "IN GROUP", "DEPLOYMENT", "SEEN"],
            )
        )
    for w in found:
        if w["gone"]:
            continue
        topics = sorted({*w["owns"], *w["standby"]})
        click.echo(f"\n{w['worker']} ({w['client_id']}):")
        click.echo(
            table(
                [
                    [
                        topic,
                        workers.spans(w["owns"].get(topic, [])),
                        workers.spans(w["standby"].get(topic, [])),
                    ]
                    for topic in topics
                ],
                ["TOPIC", "OWNS", "STANDBY"],
            )
        )
    if kafka_note:
        click.echo(f"\nKafka was not asked who is in the group: {kafka_note}", err=True)
    for client in strangers:
        click.echo(
            f"\nKafka lists a member {client} of group {group!r} that has not reported to "
            "rflow (a worker still starting, or another consumer using the group)",
            err=True,
        )

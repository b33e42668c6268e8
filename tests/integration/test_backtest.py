"""``rflow backtest`` on the real stack: a week of payouts run for real on a private anvil,
then candidates replayed over it in the sandbox."""

from __future__ import annotations

from datetime import timedelta

import pytest
from aiokafka import TopicPartition
from psycopg import sql

from rflow import storage
from rflow.storage import budgets
from rflow.streams import kafka
from tests.integration import chain
from tests.integration.backtests import (
    CANDIDATE_BONUS,
    DEPLOYED_BONUS,
    FIRINGS,
    MILLI,
    TIP,
    backtest,
    rflow,
    run_a_week,
)

pytestmark = [pytest.mark.usefixtures("applied_topics", "schema"), pytest.mark.timeout(300)]


async def chain_state(url: str, relayer: str) -> tuple[int, int, int]:
    """The chain's height, the relayer's nonce and its balance."""
    w3 = chain.connect(url)
    try:
        height = int(await chain.rpc(w3, "eth_blockNumber"), 16)
        nonce = int(await chain.rpc(w3, "eth_getTransactionCount", relayer, "latest"), 16)
        balance = int(await chain.rpc(w3, "eth_getBalance", relayer, "latest"), 16)
    finally:
        await w3.provider.disconnect()
    return height, nonce, balance


def changes(run: dict) -> set[tuple[str, str, tuple[str, ...]]]:
    return {(c["change"], c["path"], tuple(c["what"])) for c in run["sends"]}


async def real_spend(settings, run_ids: list[str]) -> int:
    """What the week's runs really charged the budget (the relayer's reservations)."""
    conn = await storage.connect(settings)
    async with conn:
        charges = [c for rid in run_ids for c in await budgets.run_charges(conn, rid)]
    assert {c["status"] for c in charges} == {"spent"}
    return sum(c["amount"] for c in charges if c["asset"] == "native")


async def test_a_candidate_that_raises_a_bonus_tips_a_desk_and_tightens_the_budget(
    settings, worker_factory, tmp_path
):
    """The report names exactly the runs and sends the changes touch, its spend totals are
    right to the wei, and the chain shows no new transaction; a candidate identical to the
    deployed project reports no difference."""
    async with chain.private_anvil() as url:
        week = await run_a_week(settings, worker_factory, tmp_path, url)
        before = await chain_state(url, week.relayer.address)
        candidate = week.candidate("candidate", bonus=CANDIDATE_BONUS, cap="0.15 ether", tip=True)
        status, report, stderr = await backtest(week, candidate)
        assert status == 1, (report, stderr)
        same_status, same, same_err = await backtest(week, week.candidate("same"))
        shown = await rflow(week, "backtest", str(candidate), "--since", "7d")
        forked_status, forked, forked_err = await backtest(week, candidate, "--fork-url", url)
        limited_status, limited, _ = await backtest(week, candidate, "--limit", "3")
        assert await chain_state(url, week.relayer.address) == before
    assert report["outcome"] == "different" and report["money_moves"] is True
    assert report["firings"] == len(FIRINGS) and report["from_topic"] == len(FIRINGS)
    assert report["marks"] == {} and report["drift"] == []

    runs = {run["trigger_key"].removeprefix("manual:payouts:"): run for run in report["runs"]}
    assert {key: changes(run) for key, run in runs.items()} == {
        "week-0": {("changed", "bonus", ("value",))},
        "week-2": {("added", "tip", ())},
        "week-3": {("changed", "bonus", ("value",))},
        "week-6": {("changed", "pay[0]", ("outcome",)), ("removed", "pay[1]", ())},
        "week-7": {("changed", "bonus", ("value",)), ("added", "tip", ())},
    }
    for key in ("week-0", "week-3", "week-7"):
        [bonus] = [c for c in runs[key]["sends"] if c["path"] == "bonus"]
        assert int(bonus["old"]["value"]) == DEPLOYED_BONUS
        assert int(bonus["new"]["value"]) == CANDIDATE_BONUS
        assert bonus["new"]["to"] == week.recipients["bonus"]
        assert bonus["old"]["source"] == "recorded" and bonus["new"]["source"] == "simulated"
    for key in ("week-2", "week-7"):
        [tip] = [c["new"] for c in runs[key]["sends"] if c["path"] == "tip"]
        assert (int(tip["value"]), tip["to"], tip["outcome"]) == (
            TIP,
            week.recipients["tip"],
            "sent",
        )

    refused = runs["week-6"]
    assert (refused["old"]["status"], refused["new"]["status"]) == ("succeeded", "failed")
    assert refused["failure"] == "appears"
    [pay] = [c["new"] for c in refused["sends"] if c["path"] == "pay[0]"]
    assert pay["outcome"] == "refused" and pay["error_kind"] == "budget_exceeded"
    assert pay["error"] == (
        f"budget daily: native {130 * MILLI} + {30 * MILLI} would exceed the cap "
        f"{150 * MILLI} in 24h"
    )
    assert refused["fired_at"].startswith(str((week.start + timedelta(hours=87)).date()))

    [spend] = report["spend"]
    assert (spend["budget"], spend["asset"]) == ("daily", "native")
    assert int(spend["old"]) == await real_spend(settings, week.run_ids) == 328 * MILLI
    assert int(spend["new"]) == (328 + 3 * 2 - 50) * MILLI + 2 * TIP
    [summary] = report["summary"]
    assert summary == {
        "workflow": "payouts",
        "firings": 10,
        "differing": 5,
        "started": [10, 10],
        "failed": [0, 1],
        "sends": [18, 18],
        "refused": [0, 1],
        "added": 2,
        "removed": 1,
        "changed": 4,
    }

    text = shown.stdout.decode()
    assert shown.returncode == 1, text + shown.stderr.decode()
    assert text.index("WORKFLOW") < text.index("BUDGET") < text.index("Run ")
    assert "daily   native  0.328 ether  0.285 ether  -0.043 ether" in text
    assert "changed  bonus: 0.003 ether to" in text and "value 0.001 ether → 0.003 ether" in text

    # On an anvil fork of the node, reset to each firing's block: the same answers.
    assert forked_status == 1, (forked, forked_err)
    assert [changes(run) for run in forked["runs"]] == [changes(run) for run in report["runs"]]
    assert forked["spend"] == report["spend"] and forked["options"]["fork"] is True
    simulated = [c["new"]["source"] for run in forked["runs"] for c in run["sends"] if c["new"]]
    assert set(simulated) == {"fork", "rules"}  # rules: the refusal by the budget

    # --limit: the most recent firings; what the others spent counts as it was.
    assert limited_status == 1 and limited["firings"] == 3
    assert [run["trigger_key"] for run in limited["runs"]] == ["manual:payouts:week-7"]
    assert "the 3 most recent are replayed" in limited["notes"][0]

    assert same_status == 0, (same, same_err)
    assert same["outcome"] == "same" and same["runs"] == [] and same["money_moves"] is False
    assert [(row["old"], row["new"]) for row in same["spend"]] == [(spend["old"], spend["old"])]


async def snapshot(settings) -> dict[str, object]:
    """Every live topic's end offsets, the consumer groups, and every table's row count
    and content (but ``backtests``, the one a backtest writes)."""
    admin = kafka.admin(settings)
    consumer = kafka.consumer(settings, enable_auto_commit=False)
    await admin.start()
    await consumer.start()
    try:
        names = [
            name
            for name in await admin.list_topics()
            if name.startswith((settings.topic_prefix, settings.app_id))
        ]
        tps = []
        for name in names:
            described = (await admin.describe_topics([name]))[0]
            tps += [TopicPartition(name, p["partition"]) for p in described["partitions"]]
        offsets = {
            f"{tp.topic}[{tp.partition}]": end
            for tp, end in (await consumer.end_offsets(tps)).items()
        }
        groups = sorted(group for group, _ in await admin.list_consumer_groups())
    finally:
        await consumer.stop()
        await admin.close()
    conn = await storage.connect(settings)
    tables: dict[str, object] = {}
    async with conn:
        cur = await conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (settings.database_schema,),
        )
        for (name,) in await cur.fetchall():
            if name == "backtests":
                continue
            cur = await conn.execute(
                sql.SQL(
                    "SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM {} t"
                ).format(sql.Identifier(name))
            )
            tables[name] = await cur.fetchone()
    assert (
        len(offsets) >= 8
        and {"sends", "budget_reservations", "relayer_nonces", "runs"} <= tables.keys()
    )
    return {"offsets": offsets, "groups": groups, "tables": tables}


async def test_a_backtest_leaves_every_live_topic_and_table_as_it_was(
    settings, worker_factory, tmp_path
):
    """Before and after a backtest of a workflow with sends (and a candidate that sends
    more): the same end offsets on every topic, the same consumer groups, the same rows
    in every table (sends, reservations, nonces, runs...); only its report is new."""
    async with chain.private_anvil() as url:
        week = await run_a_week(settings, worker_factory, tmp_path, url)
        for worker in list(week.workers):
            worker.stop()  # nothing else writes while the scan runs
        before = await snapshot(settings)
        counts = {
            name: before["tables"][name][0] for name in ("sends", "budget_reservations", "runs")
        }
        assert counts == {"sends": 18, "budget_reservations": 18, "runs": 10}
        candidate = week.candidate("candidate", bonus=CANDIDATE_BONUS, cap="0.15 ether", tip=True)
        status, report, stderr = await backtest(week, candidate)
        assert status == 1, (report, stderr)
        after = await snapshot(settings)
    assert after == before
    conn = await storage.connect(settings)
    async with conn:
        cur = await conn.execute("SELECT outcome, firings, differing FROM backtests")
        assert await cur.fetchall() == [("different", 10, 5)]


async def test_the_console_shows_the_last_backtests_with_the_same_diff(
    settings, worker_factory, tmp_path
):
    """In a real browser: the Backtests page lists the last backtests (newest first); one
    opens on the summary, the spend per budget and each differing run, in the words of the
    CLI's report; a backtest that could not run says why."""
    from playwright.async_api import expect

    from tests.integration.browser import chromium, screenshot, sign_in

    async with chain.private_anvil() as url:
        week = await run_a_week(settings, worker_factory, tmp_path, url)
        status, _, _ = await backtest(week, week.candidate("same"))
        assert status == 0
        candidate = week.candidate("candidate", bonus=CANDIDATE_BONUS, cap="0.15 ether", tip=True)
        status, report, stderr = await backtest(week, candidate)
        assert status == 1, (report, stderr)
        failed = await rflow(week, "backtest", str(tmp_path / "nowhere"), "--since", "7d")
        assert failed.returncode == 2 and b"could not run" in failed.stdout
        shown = (await rflow(week, "backtest", str(candidate), "--since", "7d")).stdout.decode()
        [worker] = week.workers
        async with chromium(tmp_path / "profile") as browser:
            page = await browser.new_page()
            await sign_in(page, worker.url, settings.api_token.get_secret_value())
            await page.click("header nav a:has-text('Backtests')")
            rows = page.locator("table.backtests tbody tr")
            await expect(rows).to_have_count(4)
            await expect(rows.nth(0)).to_contain_text("5 runs differ")
            await expect(rows.nth(1)).to_contain_text("could not run")
            await expect(rows.nth(1)).to_contain_text("nowhere")
            await expect(rows.nth(3)).to_contain_text("no difference")
            await screenshot(page, "backtests")
            await rows.nth(2).locator("a").first.click()
            await expect(page.locator("h1")).to_contain_text("different")
            await expect(page.locator(".headline")).to_have_text(
                "5 runs differ; money moves differently."
            )
            spend = page.locator("table.spend tr[data-budget='daily']")
            await expect(spend).to_contain_text("0.328 ether")
            await expect(spend).to_contain_text("0.285 ether")
            await expect(page.locator("section.run-diff")).to_have_count(5)
            refused = page.locator("section.run-diff[data-trigger-key='manual:payouts:week-6']")
            await expect(refused.locator(".status-line")).to_contain_text("failure appears")
            await expect(refused.locator("tr.send-changed")).to_contain_text(
                "outcome sent → refused budget_exceeded"
            )
            await expect(refused.locator("tr.send-removed")).to_contain_text("pay[1]")
            week0 = page.locator("section.run-diff[data-trigger-key='manual:payouts:week-0']")
            await expect(week0.locator("tr.send-changed")).to_contain_text(
                "value 0.001 ether → 0.003 ether"
            )
            # The same sentences as the CLI's report.
            for line in (await week0.locator("tr.send-changed td").nth(2).inner_text(),):
                assert line in shown
            await screenshot(page, "backtest")
            await page.goto(f"{worker.url}/console/backtests/999999")
            await expect(page.locator("main")).to_contain_text("There is no backtest '999999'.")


async def deployments(settings) -> int:
    conn = await storage.connect(settings)
    async with conn:
        cur = await conn.execute("SELECT count(*) FROM deployments")
        return (await cur.fetchone())[0]


async def test_deploy_backtest_asks_before_a_version_that_moves_money_differently(
    settings, worker_factory, tmp_path
):
    """``rflow deploy --backtest 7d`` prints the report first; a version that moves money
    differently is published only when told yes (or with --yes); one that does not is
    published without a question; one the backtest cannot run is not published."""
    async with chain.private_anvil() as url:
        week = await run_a_week(settings, worker_factory, tmp_path, url)
        assert await deployments(settings) == 1
        candidate = week.candidate("candidate", bonus=CANDIDATE_BONUS, cap="0.15 ether", tip=True)

        refused = await rflow(week, "deploy", str(candidate), "--backtest", "7d", stdin=b"n\n")
        err = refused.stderr.decode()
        assert refused.returncode == 1, err
        assert "Money would move differently" in err and "nothing deployed" in err
        assert "5 runs differ; money moves differently." in refused.stdout.decode()
        assert await deployments(settings) == 1

        told = await rflow(week, "deploy", str(candidate), "--backtest", "7d", stdin=b"y\n")
        assert told.returncode == 0, told.stderr.decode()
        assert "deployment 2" in told.stdout.decode()
        assert await deployments(settings) == 2

        # Against deployment 2 now: the week's first version moves money differently too.
        back = week.candidate("back")
        scripted = await rflow(week, "deploy", str(back), "--backtest", "7d", "--yes")
        assert scripted.returncode == 0, scripted.stderr.decode()
        assert "Deploy it anyway" not in scripted.stderr.decode()
        assert await deployments(settings) == 3

        quiet = await rflow(week, "deploy", str(back), "--backtest", "7d", stdin=b"")
        assert quiet.returncode == 0, quiet.stderr.decode()
        assert "No difference" in quiet.stdout.decode()
        assert "this project already" in quiet.stdout.decode()

        broken = await rflow(week, "deploy", str(back), "--backtest", "soon")
        assert broken.returncode == 2
        assert "the backtest could not run" in broken.stderr.decode()
        assert await deployments(settings) == 3


async def test_firings_the_topic_no_longer_keeps_are_rebuilt_from_the_read_model(
    settings, worker_factory, tmp_path
):
    """With every firing gone from the triggers topic (as retention deletes them), the
    backtest rebuilds them from the read model's runs, says so, and replays them as they
    went: an identical candidate reports no difference, the spend is the real spend."""
    async with chain.private_anvil() as url:
        week = await run_a_week(settings, worker_factory, tmp_path, url)
        admin = kafka.admin(settings)
        consumer = kafka.consumer(settings)
        await admin.start()
        await consumer.start()
        try:
            from aiokafka.admin.records_to_delete import RecordsToDelete

            topic = settings.topic_prefix + "rflow.triggers"
            tps = [TopicPartition(topic, p) for p in range(8)]
            ends = await consumer.end_offsets(tps)
            await admin.delete_records({tp: RecordsToDelete(ends[tp]) for tp in tps})
            assert await consumer.beginning_offsets(tps) == ends
        finally:
            await consumer.stop()
            await admin.close()
        status, report, stderr = await backtest(week, week.candidate("same"))
    assert status == 0, (report, stderr)
    assert (report["from_topic"], report["from_read_model"]) == (0, 10)
    assert report["marks"] == {"reconstructed": 20}  # each run, in both versions
    assert report["drift"] == [] and report["runs"] == []
    assert int(report["spend"][0]["old"]) == await real_spend(settings, week.run_ids)
    assert any("no longer holds its oldest records" in note for note in report["notes"])

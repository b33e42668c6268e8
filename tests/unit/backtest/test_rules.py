"""The window, the block a query is asked at, what a node that keeps no state says,
which recorded step answers a request, and what a wait gets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rflow.backtest.chain import at_block, missing_state
from rflow.backtest.history import RecordedRun, RecordedStep, WindowError, window
from rflow.backtest.simulate import Context, query_answer, wait_answer
from rflow.engine.effects import Execute, Park
from rflow.ingress.rpc import RpcError
from tests.unit.backtest.world import T0, project

NOW = datetime(2026, 3, 9, 12, tzinfo=UTC)


def test_the_window_by_since_or_from_and_to():
    assert window(since="36h", start=None, end=None, now=NOW).start == NOW - timedelta(hours=36)
    span = window(since=None, start="2026-03-01", end="2026-03-02T06:00:00Z", now=NOW)
    assert (span.start, span.end) == (
        datetime(2026, 3, 1, tzinfo=UTC),
        datetime(2026, 3, 2, 6, tzinfo=UTC),
    )
    assert window(since=None, start=None, end=None, now=NOW).length == timedelta(days=7)


@pytest.mark.parametrize(
    ("since", "start", "end", "message"),
    [
        ("7d", "2026-03-01", None, "--since and --from/--to are two ways"),
        ("soon", None, None, "--since 'soon'"),
        (None, None, "2026-03-01", "--to needs --from"),
        (None, "2026-03-02", "2026-03-01", "must be after --from"),
        (None, "yesterday", None, "--from 'yesterday'"),
    ],
)
def test_a_window_that_makes_no_sense_says_which_option_and_why(since, start, end, message):
    with pytest.raises(WindowError, match=message):
        window(since=since, start=start, end=end, now=NOW)


def test_a_query_for_the_latest_state_is_asked_at_the_firings_block():
    assert at_block("eth_getBalance", ["0xa"], 7) == ["0xa", "0x7"]
    assert at_block("eth_getBalance", ["0xa", "latest"], 7) == ["0xa", "0x7"]
    assert at_block("eth_getBalance", ["0xa", "0x2"], 7) == ["0xa", "0x2"]
    assert at_block("eth_getStorageAt", ["0xa", "0x0"], 7) == ["0xa", "0x0", "0x7"]
    assert at_block("eth_getBlockByNumber", ["latest", False], 7) == ["0x7", False]
    assert at_block("eth_getLogs", [{"fromBlock": "0x1"}], 7) == [
        {"fromBlock": "0x1", "toBlock": "0x7"}
    ]
    assert at_block("eth_chainId", [], 7) == []


def test_what_nodes_say_when_they_keep_no_state_at_a_block():
    assert missing_state(RpcError("eth_call", -32000, "missing trie node abc (path )"))
    assert missing_state(RpcError("eth_call", -32000, "header not found"))
    assert missing_state(RpcError("eth_getBalance", -32000, "BlockOutOfRange: block 5"))
    assert not missing_state(RpcError("eth_call", 3, "execution reverted: paused"))


def step(path: str, kind: str, action, output, **fields) -> RecordedStep:
    base = dict(
        path=path, visit=1, kind=kind, status="succeeded", attempt=1, input=action,
        output=output, error_kind=None, error_message=None, started_at=T0,
        settled_at=T0 + timedelta(seconds=2),
    )  # fmt: skip
    return RecordedStep(**{**base, **fields})


def test_the_same_request_is_answered_where_it_was_made_else_wherever_it_was():
    get = {"url": "https://a.test", "method": "GET"}
    run = RecordedRun(
        run_id="r1",
        workflow="w",
        version="v",
        status="succeeded",
        trigger_key="k",
        steps=(step("price", "http_call", get, {"status": 200}),),
    )
    assert run.answer_for("http_call", dict(get), "price", 1).output == {"status": 200}
    assert run.answer_for("http_call", dict(get), "quote", 1).path == "price"
    assert run.answer_for("http_call", {**get, "url": "https://b.test"}, "price", 1) is None
    assert run.answer_for("notify", dict(get), "quote", 1) is None


def context(recorded=None, assume=None) -> Context:
    return Context(
        side="candidate",
        project=project(""),
        env={},
        chain=None,  # type: ignore[arg-type]
        block=None,  # type: ignore[arg-type]
        recorded=recorded,
        assume=assume,
    )


def park(path: str = "ok", approval: bool = True) -> Park:
    wait = {"approval": {"prompt": "pay?"}} if approval else {"webhook": {"path": "/x"}}
    return Park(run_id="r1", workflow="w", path=path, wait_id="w:k:ok", wait=wait)


def test_a_wait_takes_the_recorded_decision_after_as_long_as_it_took():
    recorded = RecordedRun(
        run_id="r1",
        workflow="w",
        version="v",
        status="succeeded",
        trigger_key="k",
        steps=(
            step("ok", "wait_for", {}, {"decision": "reject", "by": "lead", "escalation": {}}),
            step("late", "wait_for", {}, {"timed_out": True}),
        ),
    )
    found = wait_answer(context(recorded, assume="approve"), park("ok"), 1)
    assert (found.answered, found.payload, found.after) == (
        True,
        {"decision": "reject", "by": "lead"},
        timedelta(seconds=2),
    )
    assert not wait_answer(context(recorded, assume="approve"), park("late"), 1).answered


def test_a_wait_never_answered_takes_assume_or_nothing():
    assumed = wait_answer(context(assume="reject"), park(), 1)
    assert assumed.payload == {"decision": "reject", "by": "--assume reject"}
    assert [m.kind for m in assumed.marks] == ["assumed"]
    webhook = wait_answer(context(assume="reject"), park(approval=False), 1)
    assert not webhook.answered  # a webhook has no "reject": its timeout applies
    silent = wait_answer(context(), park(), 1)
    assert not silent.answered and [m.kind for m in silent.marks] == ["no_answer"]


async def test_a_query_that_could_change_a_chain_is_never_sent():
    effect = Execute(
        run_id="r1",
        workflow="w",
        path="q",
        visit=1,
        attempt=1,
        key="k",
        kind="query",
        action={"network": "local", "method": "eth_sendRawTransaction", "params": ["0x01"]},
    )
    found = await query_answer(context(), effect)
    assert found.mark.kind == "unrecorded" and "eth_sendRawTransaction" in found.mark.text


def http(method: str, url: str = "https://prices.test/eth", **extra) -> Execute:
    return Execute(
        run_id="r1",
        workflow="quote",
        path="price",
        visit=1,
        attempt=1,
        key="k",
        kind="http_call",
        action={"method": method, "url": url, **extra},
    )


QUOTE = """
workflows:
  quote:
    trigger: { manual: {} }
    permissions: { http_hosts: [prices.test] }
    steps:
      - id: price
        http_call: { url: "https://prices.test/eth" }
"""


async def test_live_http_sends_a_get_within_the_hosts_allowed_and_never_another_method():
    from rflow.backtest.simulate import http_answer

    asked = []

    async def fetch(url, headers):
        asked.append(url)
        return {"status": 200 if "eth" in url else 503, "body": "{}", "headers": {}}

    live = context()
    live.project, live.live_http, live.fetch = project(QUOTE), True, fetch
    found = await http_answer(live, http("GET"))
    assert found.output["status"] == 200 and [m.kind for m in found.marks] == ["live"]
    down = await http_answer(live, http("GET", "https://prices.test/btc"))
    assert down.error.kind == "data_unavailable" and "HTTP 503" in down.error.message
    elsewhere = await http_answer(live, http("GET", "https://other.test/eth"))
    assert elsewhere.error.kind == "permission_denied"
    stopped = await http_answer(live, http("POST", body={"a": 1}))
    assert stopped.mark.kind == "unrecorded" and "--live-http sends GETs only" in stopped.mark.text
    assert 'POST https://prices.test/eth with body {"a":1}' in stopped.mark.text
    assert asked == ["https://prices.test/eth", "https://prices.test/btc"]

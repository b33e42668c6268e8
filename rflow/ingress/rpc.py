"""A small JSON-RPC client for the chain follower, and the new-heads watcher.

Only the handful of calls the follower needs, over one aiohttp session, with two
error types: :class:`RpcUnavailable` (the node could not be asked; retry later) and
:class:`RpcError` (the node answered with an error). Results stay JSON (0x hex
quantities), which is what the pure tracking and decoding code takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from rflow.ingress.blocks import BlockRef
from rflow.lang import Project
from rflow.secrets import Secrets, redact_url
from rflow.settings import Settings

log = logging.getLogger(__name__)


class RpcError(Exception):
    """The node answered a call with a JSON-RPC error."""

    def __init__(self, method: str, code: Any, message: str, data: Any = None) -> None:
        super().__init__(f"{method}: error {code}: {message}")
        self.method = method
        self.code = code
        self.message = message
        self.data = data


class RpcUnavailable(Exception):
    """The node could not be reached, timed out, or answered with something not JSON-RPC."""


class ChainMoved(Exception):
    """The chain changed while it was being read (a reorg between two calls); read again."""


class Calls:
    """The calls the follower makes, on top of ``call`` and ``batch`` (one node's
    :class:`JsonRpc`, or a network's :class:`~rflow.ingress.pool.RpcPool`)."""

    label: str

    async def call(self, method: str, *params: Any) -> Any:
        raise NotImplementedError

    async def batch(self, calls: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
        raise NotImplementedError

    async def chain_id(self) -> int:
        """``eth_chainId``."""
        return int(await self.call("eth_chainId"), 16)

    async def block_number(self) -> int:
        """``eth_blockNumber``."""
        return int(await self.call("eth_blockNumber"), 16)

    async def header(self, number: int | Literal["latest"]) -> BlockRef | None:
        """The header at ``number`` (or the latest); ``None`` if the node has none."""
        tag = number if isinstance(number, str) else hex(number)
        found = await self.call("eth_getBlockByNumber", tag, False)
        return _header(found)

    async def header_by_hash(self, block_hash: str) -> BlockRef | None:
        """The header of ``block_hash``; ``None`` if the node does not have it."""
        return _header(await self.call("eth_getBlockByHash", block_hash, False))

    async def headers(self, numbers: Iterable[int]) -> list[BlockRef | None]:
        """Headers by number, in one batch."""
        calls = [("eth_getBlockByNumber", (hex(n), False)) for n in numbers]
        return [_header(found) for found in await self.batch(calls)]

    async def logs(self, queries: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        """``eth_getLogs`` for each filter, in one batch."""
        results = await self.batch([("eth_getLogs", (q,)) for q in queries])
        for query, result in zip(queries, results, strict=True):
            if not isinstance(result, list):
                raise RpcUnavailable(f"eth_getLogs {query} returned {type(result).__name__}")
        return results


class JsonRpc(Calls):
    """JSON-RPC over HTTP; use ``async with JsonRpc(url) as rpc``.

    ``url`` may carry an API key (in its user, password, path or query): its messages and
    log lines show only :attr:`shown`, its scheme and host, and scrub the key from what a
    library or the node quotes back."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url
        self.label = "the node"
        self.shown = redact_url(url)
        """The URL as messages show it: scheme and host only."""
        self.scrub = Secrets({}).hide_urls(url).scrub
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._ids = itertools.count(1)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> JsonRpc:
        self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        """The open HTTP session (the head watcher's websocket uses it too)."""
        if self._session is None:
            raise RuntimeError("use `async with JsonRpc(url)` before calling")
        return self._session

    async def _post(self, body: Any) -> Any:
        try:
            async with self.session.post(self.url, json=body) as resp:
                if resp.status >= 400:
                    text = (await resp.text())[:200]
                    raise RpcUnavailable(
                        f"{self.shown} answered HTTP {resp.status}: {self.scrub(text)}"
                    )
                return await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise RpcUnavailable(
                f"{self.shown}: {type(exc).__name__}: {self.scrub(str(exc))}"
            ) from None

    async def call(self, method: str, *params: Any) -> Any:
        """One call; its ``result``."""
        answer = await self._post(
            {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": list(params)}
        )
        try:
            return _result(method, answer)
        except RpcError as exc:
            raise self._scrubbed(exc) from None

    def _scrubbed(self, answer: Any) -> Any:
        """``answer`` with the key scrubbed from it if it is an error the node answered
        (a node may quote the request's URL or headers back)."""
        if not isinstance(answer, RpcError):
            return answer
        message, data = self.scrub(answer.message), self.scrub(answer.data)
        if message == answer.message and data == answer.data:
            return answer
        return RpcError(answer.method, answer.code, message, data)

    async def batch(self, calls: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
        """Several calls in one request; results in call order (the first error raised)."""
        answers = await self.answers(calls)
        for answer in answers:
            if isinstance(answer, RpcError | RpcUnavailable):
                raise answer
        return answers

    async def answers(self, calls: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
        """Several calls in one request; each call's result, or its error as an
        :class:`RpcError` (or :class:`RpcUnavailable`) in its place, in call order.
        Raises :class:`RpcUnavailable` when the request as a whole went unanswered."""
        if not calls:
            return []
        ids = [next(self._ids) for _ in calls]
        body = [
            {"jsonrpc": "2.0", "id": i, "method": m, "params": list(p)}
            for i, (m, p) in zip(ids, calls, strict=True)
        ]
        answer = await self._post(body)
        if not isinstance(answer, list):
            # A node (or provider plan) without batches answers with one error object:
            # ask one call at a time instead.
            log.debug("%s refused a batch (%s); calling one by one", self.shown, self.scrub(answer))
            results: list[Any] = []
            for method, params in calls:
                try:
                    results.append(await self.call(method, *params))
                except (RpcError, RpcUnavailable) as exc:
                    results.append(exc)
            return results
        by_id = {a.get("id"): a for a in answer if isinstance(a, dict)}
        missing = [m for i, (m, _) in zip(ids, calls, strict=True) if i not in by_id]
        if missing:
            raise RpcUnavailable(f"{self.shown} left {len(missing)} batched calls unanswered")
        return [self._scrubbed(_answer(m, by_id[i])) for i, (m, _) in zip(ids, calls, strict=True)]


@dataclass(frozen=True)
class Endpoints:
    """Where a network's node answers: JSON-RPC over HTTP, and a websocket if any."""

    http: str
    ws: str | None


def endpoints(
    settings: Settings,
    project: Project,
    network: str,
    env: Mapping[str, str] | None = None,
    ws_url: str | None = None,
) -> Endpoints:
    """The first endpoint of ``network`` (see :func:`rflow.ingress.pool.network_endpoints`):
    its ``rpc_url_env`` variable if set, else the settings.

    The websocket is ``ws_url`` if given, else the RPC URL with ``ws(s)://`` for
    ``http(s)://`` (where anvil, geth and most self-hosted nodes serve it). A ``ws://``
    RPC URL works the other way round.
    """
    from rflow.ingress.pool import network_endpoints

    first = network_endpoints(settings, project, network, env)[0]
    return Endpoints(first.http, ws_url or first.ws)


def _answer(method: str, answer: Any) -> Any:
    """A batched call's result, or its error in its place."""
    try:
        return _result(method, answer)
    except (RpcError, RpcUnavailable) as exc:
        return exc


def _result(method: str, answer: Any) -> Any:
    if not isinstance(answer, dict):
        raise RpcUnavailable(f"{method}: not a JSON-RPC answer: {str(answer)[:200]}")
    if answer.get("error") is not None:
        error = answer["error"]
        if isinstance(error, dict):
            raise RpcError(method, error.get("code"), str(error.get("message")), error.get("data"))
        raise RpcError(method, None, str(error))
    if "result" not in answer:
        raise RpcUnavailable(f"{method}: answer without result: {str(answer)[:200]}")
    return answer["result"]


def _header(found: Any) -> BlockRef | None:
    if found is None:
        return None
    try:
        return BlockRef.from_rpc(found)
    except ValueError as exc:
        raise RpcUnavailable(str(exc)) from None


Mode = Literal["starting", "websocket", "polling"]


class HeadWatcher:
    """Tells the follower when the chain may have a new head.

    Subscribes to ``newHeads`` over a websocket; while that fails, polls
    ``eth_blockNumber`` every ``poll_interval`` seconds and tries the websocket again
    every ``ws_retry`` seconds. A notification is only a wake-up: the follower reads
    headers itself, so a missed or duplicated notification costs nothing but time.
    """

    def __init__(
        self,
        rpc: Any,
        ws_url: str | None,
        *,
        poll_interval: float = 0.25,
        ws_retry: float = 30.0,
    ) -> None:
        self.rpc = rpc
        self.ws_url = ws_url
        self.poll_interval = poll_interval
        self.ws_retry = ws_retry
        self.mode: Mode = "starting"
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> HeadWatcher:
        self._task = asyncio.create_task(self._run(), name=f"rflow.heads {self.rpc.label}")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def wait(self, timeout: float) -> bool:
        """Wait for a possible new head, at most ``timeout`` seconds; True if woken."""
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation
        # that arrives as the event is set, and the follower's loop would never stop.
        try:
            async with asyncio.timeout(timeout):
                await self._wake.wait()
        except TimeoutError:
            return False
        finally:
            self._wake.clear()
        return True

    async def _run(self) -> None:
        while True:
            if self.ws_url:
                await self._subscribe(self.ws_url)
            await self._poll(self.ws_retry if self.ws_url else None)

    async def _subscribe(self, url: str) -> None:
        shown = redact_url(url)
        try:
            async with self.rpc.session.ws_connect(url, heartbeat=10.0) as ws:
                await ws.send_json(
                    {"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": ["newHeads"]}
                )
                reply = await ws.receive_json(timeout=10.0)
                if not isinstance(reply, dict) or reply.get("error") or "result" not in reply:
                    log.warning("%s refused the newHeads subscription: %s", shown, reply)
                    return
                self.mode = "websocket"
                log.info("following new heads over %s", shown)
                self._wake.set()  # anything mined while we were connecting
                async for message in ws:
                    if message.type == aiohttp.WSMsgType.TEXT:
                        self._wake.set()
                    elif message.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                        break
        except (aiohttp.ClientError, TimeoutError, ValueError, TypeError) as exc:
            log.warning(
                "websocket %s failed (%s); polling every %.2fs",
                shown,
                Secrets({}).hide_urls(url).scrub(str(exc)),
                self.poll_interval,
            )
        else:
            log.warning("websocket %s closed; polling every %.2fs", shown, self.poll_interval)

    async def _poll(self, duration: float | None) -> None:
        self.mode = "polling"
        self._wake.set()
        loop = asyncio.get_running_loop()
        until = None if duration is None else loop.time() + duration
        last: int | None = None
        while until is None or loop.time() < until:
            try:
                number = await self.rpc.block_number()
            except (RpcUnavailable, RpcError, ValueError, TypeError) as exc:
                log.debug("polling %s failed: %s", self.rpc.label, exc)
                number = None
            if number is None or number != last:
                # A failed poll wakes the follower too: its own calls then meet the
                # error and back off, rather than waiting here unaware.
                self._wake.set()
                last = number
            await asyncio.sleep(self.poll_interval)

"""A network's JSON-RPC endpoints, as one client that fails over and can ask them all.

A network may list several providers (``networks.<name>.endpoints``). An
:class:`RpcPool` reads from one of them at a time, the *current* endpoint, and moves
to another when it fails. The rules, one place each:

1. **Failures of the endpoint count, answers about the request do not.** No
   connection, a timeout, an HTTP error status, an answer that is not JSON-RPC, and an
   error where the endpoint should have answered (an internal error, a rate limit, an
   unknown method, or any error to a plain read such as ``eth_blockNumber``) count
   against the endpoint, and the call goes to the next one (:meth:`RpcPool._first`). An
   error the node answers about a transaction or a call ("nonce too low", "already
   known", "replacement underpriced", a revert: :func:`about_the_request`) is returned as
   it is and never marks the endpoint down.
2. **A breaker per endpoint** (:class:`Breaker`): :data:`FAILURES` consecutive transport
   failures open it for :data:`COOL_DOWN` seconds, doubling while it keeps failing (up
   to :data:`MAX_COOL_DOWN`); then calls may try it again, and the first answer closes
   it. An endpoint whose breaker is open is tried only when every other one failed.
3. **Lagging endpoints step aside.** While the pool is used, each endpoint's head is
   read every :data:`HEAD_INTERVAL` seconds; one more than the network's
   ``max_lag_blocks`` behind the best is read from only when no endpoint that keeps up
   answers (:meth:`RpcPool.order`).
4. **The current endpoint is kept** while it answers and keeps up, so consecutive reads
   see one node's view of the chain; a new one is picked by weight among those that
   qualify.
5. **Absence is decided by all.** :meth:`RpcPool.each` asks every endpoint at once; what
   concludes that something is *not* there (a receipt, a transaction) must hear it from
   every endpoint, and an endpoint that could not be asked makes it inconclusive.

Errors name endpoints by their declared name, never by URL (a URL may carry an API key).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from rflow.ingress.rpc import Calls, JsonRpc, RpcError, RpcUnavailable
from rflow.lang import Project
from rflow.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

FAILURES = 3
"""Consecutive transport failures that open an endpoint's breaker."""
COOL_DOWN = 5.0
"""Seconds an endpoint's breaker stays open the first time."""
MAX_COOL_DOWN = 60.0
"""The longest an open breaker waits before calls may try the endpoint again."""
HEAD_INTERVAL = 2.0
"""Seconds between readings of every endpoint's head while the pool is used."""
HEAD_TIMEOUT = 3.0
"""Seconds a head reading may take before the endpoint counts as not answering."""


ABOUT_THE_REQUEST = frozenset({"eth_sendRawTransaction", "eth_call", "eth_estimateGas"})
"""Methods whose errors can be answers about what was sent (a revert, a transaction the
node will not take): the endpoint is working."""
ENDPOINT_FAULTS = frozenset({-32603, -32005, -32601})
"""JSON-RPC error codes that are about the endpoint whatever the method: an internal
error, a request over its limit (EIP-1474), a method it does not offer."""


def about_the_request(error: RpcError) -> bool:
    """Whether ``error`` answers the request (the endpoint works) rather than says the
    endpoint could not (rule 1)."""
    return error.method in ABOUT_THE_REQUEST and error.code not in ENDPOINT_FAULTS


class EndpointFault(RpcUnavailable):
    """An endpoint answered with an error where it should have answered (rule 1)."""

    def __init__(self, error: RpcError) -> None:
        super().__init__(str(error))
        self.error = error


def _faults(answers: Any) -> RpcError | None:
    """The first error in a batch's answers that is the endpoint's fault, if any."""
    for answer in answers if isinstance(answers, list) else ():
        if isinstance(answer, RpcError) and not about_the_request(answer):
            return answer
    return None


@dataclass(frozen=True, slots=True)
class EndpointUrl:
    """Where one endpoint of a network answers, as configured (never shown: the URLs
    may carry API keys)."""

    name: str
    http: str
    ws: str | None = None
    weight: int = 1


def _derived_ws(url: str) -> tuple[str, str | None]:
    """``(http, ws)`` for ``url``: the websocket of an ``http(s)://`` URL is its
    ``ws(s)://`` twin (where anvil, geth and most nodes serve it), and the other way."""
    if url.startswith(("ws://", "wss://")):
        return "http" + url[2:], url
    if url.startswith(("http://", "https://")):
        return url, "ws" + url[4:]
    return url, None


def network_endpoints(
    settings: Settings,
    project: Project,
    network: str,
    env: Mapping[str, str] | None = None,
) -> list[EndpointUrl]:
    """The endpoints of ``network``, in declared order. A network without ``endpoints``
    has one, ``default``: its ``rpc_url_env`` variable if set, else the settings'
    ``RFLOW_RPC_URL_<NETWORK>``. ``LookupError`` names a variable that is not set."""
    declared = project.networks.get(network)
    env = env or {}
    if declared is not None and declared.endpoints:
        found = []
        for endpoint in declared.endpoints:
            url = env.get(endpoint.url_env)
            if not url:
                raise LookupError(
                    f"endpoint {endpoint.name} of network {network}: environment variable "
                    f"{endpoint.url_env} is not set"
                )
            http, ws = _derived_ws(url)
            found.append(EndpointUrl(endpoint.name, http, ws, endpoint.weight))
        return found
    url = None
    if declared is not None and declared.rpc_url_env:
        url = env.get(declared.rpc_url_env)
    if not url:
        url = settings.rpc_urls.get(network.lower().replace("-", "_")) or settings.rpc_url(network)
    http, ws = _derived_ws(url)
    return [EndpointUrl("default", http, ws)]


class Breaker:
    """One endpoint's breaker: closed, open (for a cool-down), or half-open (calls may
    try it again; the first answer closes it, the first failure opens it longer)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.failures = 0
        self.cool_down = COOL_DOWN
        self.open_until: float | None = None

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half_open``."""
        if self.open_until is None:
            return "closed"
        return "open" if self.clock() < self.open_until else "half_open"

    def answered(self) -> None:
        self.failures = 0
        self.cool_down = COOL_DOWN
        self.open_until = None

    def failed(self) -> None:
        self.failures += 1
        state = self.state
        if state == "half_open" or (state == "closed" and self.failures >= FAILURES):
            self.open_until = self.clock() + self.cool_down
            self.cool_down = min(self.cool_down * 2, MAX_COOL_DOWN)


class Observer(Protocol):
    """What the pool reports for metrics (a worker's :class:`~rflow.streams.metrics.Metrics`)."""

    def rpc_called(self, network: str, endpoint: str, outcome: str, seconds: float) -> None:
        """One request to an endpoint: ``outcome`` is ``ok``, ``error`` (the node answered
        with an error) or ``unavailable`` (a transport failure)."""

    def rpc_health(self, network: str, endpoint: str, breaker: str, lag: int | None) -> None:
        """An endpoint's breaker state and how many blocks it is behind the best."""


class Endpoint:
    """One endpoint of a pool: its client, breaker and last known head."""

    def __init__(self, url: EndpointUrl, timeout: float, clock: Callable[[], float]) -> None:
        self.name = url.name
        self.weight = url.weight
        self.ws = url.ws
        self.rpc = JsonRpc(url.http, timeout=timeout)
        self.breaker = Breaker(clock)
        self.head: int | None = None

    def __repr__(self) -> str:  # never the URL
        return f"Endpoint({self.name!r}, {self.breaker.state})"


class RpcPool(Calls):
    """The endpoints of one network as one JSON-RPC client (see the module's rules);
    use ``async with RpcPool(...) as pool``."""

    def __init__(
        self,
        network: str,
        urls: Sequence[EndpointUrl],
        *,
        timeout: float = 10.0,
        max_lag: int = 5,
        observer: Observer | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        if not urls:
            raise ValueError(f"network {network} has no endpoint")
        self.network = network
        self.endpoints = [Endpoint(url, timeout, clock) for url in urls]
        self.max_lag = max_lag
        self.observer = observer
        self.clock = clock
        self.rng = rng or random.Random()
        self.current: Endpoint | None = None
        self._heads_at = -HEAD_INTERVAL
        self._heads_task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RpcPool:
        for endpoint in self.endpoints:
            await endpoint.rpc.__aenter__()
            self._report(endpoint)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._heads_task is not None:
            self._heads_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._heads_task
        for endpoint in self.endpoints:
            await endpoint.rpc.__aexit__(*exc_info)

    @property
    def label(self) -> str:
        """How messages name the node being read from: the network and its endpoint."""
        current = self.current or self.endpoints[0]
        return f"{self.network} ({current.name})" if len(self.endpoints) > 1 else self.network

    @property
    def session(self) -> Any:
        """The HTTP session of the current endpoint (the head watcher's websocket)."""
        return (self.current or self.endpoints[0]).rpc.session

    @property
    def ws(self) -> str | None:
        """The websocket of the current endpoint, if it has one."""
        return (self.current or self.endpoints[0]).ws

    # --- choosing -----------------------------------------------------------------

    def lag(self, endpoint: Endpoint) -> int | None:
        """Blocks ``endpoint`` is behind the best head known; ``None`` before it is read."""
        heads = [e.head for e in self.endpoints if e.head is not None]
        if endpoint.head is None or not heads:
            return None
        return max(heads) - endpoint.head

    def lagging(self, endpoint: Endpoint) -> bool:
        lag = self.lag(endpoint)
        return lag is not None and lag > self.max_lag

    def order(self) -> list[Endpoint]:
        """The endpoints in the order a read tries them: the current one while it keeps
        up and its breaker is not open; the others that keep up, by weight; those that
        lag; those whose breaker is open."""
        self._watch_heads()
        usable = [e for e in self.endpoints if e.breaker.state != "open"]
        keeping_up = [e for e in usable if not self.lagging(e)]
        current = self.current if self.current in keeping_up else None
        rest = [e for e in keeping_up if e is not current]
        ordered = ([current] if current else []) + self._by_weight(rest)
        ordered += [e for e in usable if e not in ordered]
        return ordered + [e for e in self.endpoints if e not in ordered]

    def _by_weight(self, endpoints: list[Endpoint]) -> list[Endpoint]:
        """``endpoints`` drawn one after another, each with a chance its weight's share."""
        left, drawn = list(endpoints), []
        while left:
            pick = self.rng.choices(left, weights=[e.weight for e in left])[0]
            drawn.append(pick)
            left.remove(pick)
        return drawn

    # --- asking ---------------------------------------------------------------------

    async def _on(self, endpoint: Endpoint, ask: Callable[[JsonRpc], Awaitable[T]]) -> T:
        """``ask`` on ``endpoint``, with its breaker and metrics kept. An error answer that
        is the endpoint's fault (rule 1), alone or in a batch, is raised as
        :class:`EndpointFault`."""
        started = time.monotonic()
        before = endpoint.breaker.state
        try:
            result = await ask(endpoint.rpc)
        except RpcUnavailable:
            endpoint.breaker.failed()
            self._observe(endpoint, "unavailable", started, before)
            raise
        except RpcError as exc:
            if about_the_request(exc):
                endpoint.breaker.answered()
                self._observe(endpoint, "error", started, before)
                raise
            endpoint.breaker.failed()
            self._observe(endpoint, "error", started, before)
            raise EndpointFault(exc) from None
        fault = _faults(result)
        if fault is not None:
            endpoint.breaker.failed()
            self._observe(endpoint, "error", started, before)
            raise EndpointFault(fault)
        endpoint.breaker.answered()
        self._observe(endpoint, "ok", started, before)
        return result

    async def _first(self, ask: Callable[[JsonRpc], Awaitable[T]]) -> T:
        """``ask`` on the endpoints in :meth:`order` until one answers (rule 1). When
        none does and one answered with an error, that error is raised (the caller sorts
        what the node said); else :class:`RpcUnavailable`."""
        failures = []
        answered: RpcError | None = None
        for endpoint in self.order():
            try:
                result = await self._on(endpoint, ask)
            except EndpointFault as exc:
                answered = exc.error
                failures.append(f"{endpoint.name}: {exc}")
            except RpcUnavailable as exc:
                failures.append(f"{endpoint.name}: {exc}")
            except RpcError:
                self.current = endpoint
                raise
            else:
                if self.current is not endpoint and len(self.endpoints) > 1:
                    log.info("%s: reading from endpoint %s", self.network, endpoint.name)
                self.current = endpoint
                return result
            if endpoint is self.current:
                self.current = None
        if answered is not None:
            raise answered
        if len(self.endpoints) == 1:
            raise RpcUnavailable(failures[0].partition(": ")[2])
        raise RpcUnavailable(f"no endpoint of {self.network} answered: " + "; ".join(failures))

    async def call(self, method: str, *params: Any) -> Any:
        """One call on the first endpoint that answers; its ``result``."""
        return await self._first(lambda rpc: rpc.call(method, *params))

    async def batch(self, calls: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
        """Several calls in one request to the first endpoint that answers them all
        (the first error the node answered is raised)."""
        return await self._first(lambda rpc: rpc.batch(calls))

    async def answers(self, calls: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
        """Several calls in one request to the first endpoint that answers; each call's
        result or its error in its place (see :meth:`JsonRpc.answers`)."""
        return await self._first(lambda rpc: rpc.answers(calls))

    async def each(
        self, calls: Sequence[tuple[str, Sequence[Any]]]
    ) -> list[tuple[str, list[Any] | RpcUnavailable]]:
        """``calls`` asked of every endpoint at once (rule 5): each endpoint's name with its
        answers (as :meth:`answers` gives them), or the :class:`RpcUnavailable` it
        failed with. An endpoint whose breaker is open is not asked; it is reported
        unavailable."""

        async def one(endpoint: Endpoint) -> list[Any] | RpcUnavailable:
            if endpoint.breaker.state == "open":
                return RpcUnavailable(f"endpoint {endpoint.name}: its breaker is open")
            try:
                return await self._on(endpoint, lambda rpc: rpc.answers(calls))
            except EndpointFault as exc:
                return exc
            except RpcUnavailable as exc:
                return exc

        found = await asyncio.gather(*(one(e) for e in self.endpoints))
        return [(e.name, answers) for e, answers in zip(self.endpoints, found, strict=True)]

    def names(self) -> list[str]:
        """The endpoints' names in :meth:`order` (for a search that must stay on one
        node's view of the chain: :meth:`on_endpoint` each in turn)."""
        return [e.name for e in self.order()]

    async def on_endpoint(self, name: str, ask: Callable[[JsonRpc], Awaitable[T]]) -> T:
        """``ask`` on the endpoint named ``name``, with its breaker and metrics kept."""
        endpoint = next(e for e in self.endpoints if e.name == name)
        return await self._on(endpoint, ask)

    # --- heads ----------------------------------------------------------------------

    def _watch_heads(self) -> None:
        """Read every endpoint's head in the background when the last reading is old
        (rule 3). A single endpoint has no one to lag behind."""
        if len(self.endpoints) < 2 or self.clock() - self._heads_at < HEAD_INTERVAL:
            return
        if self._heads_task is not None and not self._heads_task.done():
            return
        self._heads_at = self.clock()
        with contextlib.suppress(RuntimeError):  # no running loop: read them later
            self._heads_task = asyncio.get_running_loop().create_task(
                self.read_heads(), name=f"rflow.heads.{self.network}"
            )

    async def read_heads(self) -> None:
        """Read every endpoint's head now; one that lags is no longer the current one."""

        async def one(endpoint: Endpoint) -> None:
            if endpoint.breaker.state == "open":
                return
            try:
                async with asyncio.timeout(HEAD_TIMEOUT):
                    endpoint.head = int(
                        await self._on(endpoint, lambda rpc: rpc.call("eth_blockNumber")), 16
                    )
            except (RpcUnavailable, RpcError, TimeoutError, ValueError, TypeError) as exc:
                if isinstance(exc, TimeoutError):
                    endpoint.breaker.failed()
                log.debug("%s: no head from endpoint %s: %s", self.network, endpoint.name, exc)

        await asyncio.gather(*(one(e) for e in self.endpoints))
        if self.current is not None and self.lagging(self.current):
            log.warning(
                "%s: endpoint %s is %d blocks behind; reading from another",
                self.network,
                self.current.name,
                self.lag(self.current),
            )
            self.current = None
        for endpoint in self.endpoints:
            self._report(endpoint)

    def _observe(self, endpoint: Endpoint, outcome: str, started: float, before: str) -> None:
        state = endpoint.breaker.state
        if state != before:
            log.log(
                logging.WARNING if state == "open" else logging.INFO,
                "%s: endpoint %s's breaker is %s",
                self.network,
                endpoint.name,
                state.replace("_", "-"),
            )
        if self.observer is not None:
            self.observer.rpc_called(
                self.network, endpoint.name, outcome, time.monotonic() - started
            )
            if state != before:
                self._report(endpoint)

    def _report(self, endpoint: Endpoint) -> None:
        if self.observer is not None:
            lag = self.lag(endpoint) if len(self.endpoints) > 1 else 0
            self.observer.rpc_health(self.network, endpoint.name, endpoint.breaker.state, lag)


class Pools:
    """One :class:`RpcPool` per network of the current project, opened when first used
    and shared by what reads the chain in this process (the relayer, chain reads). A
    deploy that changes a network's endpoints gets a new pool."""

    def __init__(
        self,
        settings: Settings,
        project: Callable[[], Project | None],
        env: Mapping[str, str],
        *,
        timeout: float = 15.0,
        observer: Observer | None = None,
    ) -> None:
        self.settings = settings
        self.project = project
        self.env = env
        self.timeout = timeout
        self.observer = observer
        self._pools: dict[str, tuple[Any, RpcPool]] = {}
        self._retired: list[RpcPool] = []
        self._lock = asyncio.Lock()

    async def get(self, network: str) -> RpcPool:
        """The pool of ``network`` as the current project declares it. One a deploy no
        longer declares stays known (the sends made on it are still followed).
        ``LookupError`` names what is missing (the network, an endpoint's variable)."""
        project = self.project()
        declared = project.networks.get(network) if project is not None else None
        cached = self._pools.get(network)
        if cached is not None and (declared is None or cached[0] == declared):
            return cached[1]
        if project is None or declared is None:
            raise LookupError(f"no network named {network!r}")
        async with self._lock:
            cached = self._pools.get(network)
            if cached is not None and cached[0] == declared:
                return cached[1]
            urls = network_endpoints(self.settings, project, network, self.env)
            pool = RpcPool(
                network,
                urls,
                timeout=self.timeout,
                max_lag=declared.max_lag_blocks,
                observer=self.observer,
            )
            await pool.__aenter__()
            if cached is not None:
                self._retired.append(cached[1])
            self._pools[network] = (declared, pool)
            return pool

    async def close(self) -> None:
        pools = [pool for _, pool in self._pools.values()] + self._retired
        self._pools.clear()
        self._retired.clear()
        for pool in pools:
            await pool.__aexit__(None, None, None)

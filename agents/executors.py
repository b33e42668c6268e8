"""Executors: how each off-chain action of an ``Execute`` effect is carried out.

Each takes the effect (with its rendered action and idempotency key) and the effect's
:class:`~rflow.secrets.Secrets`, and returns the step's output, or raises; the caller
classifies exceptions into failure kinds and scrubs the output and the error. An
executor fills the action's ``${VAR}`` placeholders in right before it hands them on,
and hides every other value it passes along (a channel's URL, a command's environment,
an RPC URL), so none of them comes back in a result.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode
from eth_utils import function_signature_to_4byte_selector, to_checksum_address

from rflow.classify import RPC_LIMIT_EXCEEDED, http_failure, retry_after_seconds
from rflow.codecs import json
from rflow.engine import Execute
from rflow.engine.keys import header_value
from rflow.failures import FailureKind, RflowError
from rflow.hosts import check_url
from rflow.ingress.pool import RpcPool
from rflow.ingress.rpc import RpcError, RpcUnavailable
from rflow.lang.abi import parse_signature
from rflow.lang.units import parse_duration
from rflow.relayer.build import revert_reason
from rflow.secrets import Secrets
from rflow.storage import workflow_state

if TYPE_CHECKING:
    from rflow.streams.app import Runtime

log = logging.getLogger("rflow.steps")
DEFAULT_HTTP_TIMEOUT = 30.0
MAX_BODY = 1 << 20
QUOTED = 200
"""Characters of an answer quoted in an error message."""
MAX_QUOTED_BYTES = 8192
"""Bytes of an error answer read to quote from (scrubbed whole, then cut)."""

Executor = Callable[[Execute, Secrets], Awaitable[Any]]


class Executors:
    """The executors of one worker, sharing its HTTP session and RPC clients."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._session: aiohttp.ClientSession | None = None
        self.table: dict[str, Executor] = {
            "http_call": self.http_call,
            "notify": self.notify,
            "read": self.read,
            "query": self.query,
            "state_set": self.state,
            "list_add": self.state,
            "list_remove": self.state,
            "send_transaction": self.send_transaction,
            "command": self.command,
        }

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def run(self, effect: Execute, secrets: Secrets) -> Any:
        """Carry ``effect`` out; the values it is given are hidden in ``secrets``, which
        the caller scrubs the result with."""
        executor = self.table.get(effect.kind)
        if executor is None:
            raise RflowError(FailureKind.INVALID_INPUT, f"no executor for {effect.kind} steps")
        return await executor(effect, secrets)

    # --- HTTP -------------------------------------------------------------------------

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=DEFAULT_HTTP_TIMEOUT)
            )
        return self._session

    async def http_call(self, effect: Execute, secrets: Secrets) -> dict[str, Any]:
        action = secrets.resolve(effect.action)
        project = self.runtime.project
        declared = project.workflows.get(effect.workflow) if project else None
        if declared is None:
            await self.runtime.catch_up()  # a deployment this worker has not taken up yet
            project = self.runtime.project
            declared = project.workflows.get(effect.workflow) if project else None
        behind = self.runtime.checks_behind()
        if behind is not None:
            raise RflowError(FailureKind.PERMISSION_DENIED, behind)
        if project is not None and declared is None:
            # A run in flight of a removed workflow: its permissions went with it.
            raise RflowError(
                FailureKind.PERMISSION_DENIED,
                f"workflow {effect.workflow!r} is not in {self.runtime.deployment.label}, "
                "which this worker runs: its http calls are refused",
            )
        # The current deployment's permissions, not the run's pinned version's.
        check_url(action["url"], declared.permissions.http_hosts if declared else None)
        headers = {str(k): str(v) for k, v in (action.get("headers") or {}).items()}
        for name, value in headers.items():
            if not all(" " <= ch <= "~" or ch == "\t" for ch in name + value) or not name:
                raise RflowError(
                    FailureKind.INVALID_INPUT,
                    f"http_call.headers: {name!r} holds a character a header cannot carry",
                )
        # Attempts of one step share the key, so the receiver can deduplicate retries.
        headers.setdefault("Idempotency-Key", header_value(effect.key))
        body = action.get("body")
        limit = action.get("timeout")
        # Only a given timeout replaces the session's: aiohttp reads timeout=None as none.
        timeout = {"timeout": aiohttp.ClientTimeout(total=_seconds(limit))} if limit else {}
        try:
            async with self.session.request(
                action.get("method", "GET"),
                action["url"],
                headers=headers,
                json=body if body is not None else None,
                allow_redirects=False,
                **timeout,
            ) as response:
                return await self._http_answer(action, response, secrets)
        except TimeoutError:
            if not limit:
                raise
            raise RflowError(
                FailureKind.TIMEOUT, f"no answer from {action['url']} within {limit}"
            ) from None

    async def _http_answer(
        self, action: dict[str, Any], response: aiohttp.ClientResponse, secrets: Secrets
    ) -> dict[str, Any]:
        """The step's output from ``response``; a status not expected is a failure."""
        raw = await response.content.read(MAX_BODY + 1)
        text = raw[:MAX_BODY].decode("utf-8", "replace")
        expected = action.get("expect_status") or []
        ok = response.status in expected if expected else 200 <= response.status < 300
        if not ok:
            # Scrubbed before it is cut, so no part of a value is left to quote.
            raise http_failure(
                response.status,
                f"HTTP {response.status} from {action['url']}: {secrets.scrub(text)[:QUOTED]}",
                retryable=action.get("retryable_status_codes"),
                retry_after=retry_after_seconds(response.headers.get("Retry-After")),
            )
        output: dict[str, Any] = {
            "status": response.status,
            "body": text,
            "headers": dict(response.headers),
        }
        if response.content_type == "application/json":
            try:
                output["json"] = json.loads(raw[:MAX_BODY])
            except json.JSONDecodeError:
                output["json"] = None
        return output

    # --- notify -----------------------------------------------------------------------

    async def notify(self, effect: Execute, secrets: Secrets) -> dict[str, Any]:
        action = secrets.resolve(effect.action)
        project = self.runtime.project
        channel = project.channels.get(action["channel"]) if project else None
        if channel is None:
            raise RflowError(FailureKind.INVALID_INPUT, f"unknown channel {action['channel']!r}")
        message, severity = action["message"], action.get("severity", "info")
        env = self.runtime.env
        if channel.type == "log":
            # The worker's log is no place for a value either: it reads the placeholder.
            log.log(
                logging.getLevelName(channel.level.upper()),
                "[%s] %s",
                effect.workflow,
                secrets.scrub(message),
            )
            return {"channel": action["channel"], "delivered": True}
        if channel.type == "webhook":
            secrets.hide_found_in(channel.url, *channel.headers.values())
            url, payload, headers = (
                channel.url,
                {
                    "message": message,
                    "severity": severity,
                    "workflow": effect.workflow,
                    "run_id": effect.run_id,
                },
                dict(channel.headers),
            )
        elif channel.type == "slack":
            secrets.hide(channel.webhook_url_env)
            url, payload, headers = _secret(env, channel.webhook_url_env), {"text": message}, {}
        else:
            secrets.hide(channel.routing_key_env, "RFLOW_PAGERDUTY_URL")
            url = _secret(env, "RFLOW_PAGERDUTY_URL", "https://events.pagerduty.com/v2/enqueue")
            payload = {
                "routing_key": _secret(env, channel.routing_key_env),
                "event_action": "trigger",
                "dedup_key": effect.key,
                "payload": {
                    "summary": message,
                    "severity": "critical" if severity == "critical" else severity,
                    "source": f"rflow/{effect.workflow}",
                },
            }
            headers = {}
        # As http_call sends it: a key a header cannot carry goes as its digest.
        headers.setdefault("Idempotency-Key", header_value(effect.key))
        async with self.session.post(url, json=payload, headers=headers) as response:
            if not 200 <= response.status < 300:
                text = (await response.content.read(MAX_QUOTED_BYTES)).decode("utf-8", "replace")
                raise http_failure(
                    response.status,
                    f"channel {action['channel']}: HTTP {response.status}: "
                    f"{secrets.scrub(text)[:QUOTED]}",
                    retry_after=retry_after_seconds(response.headers.get("Retry-After")),
                )
        return {"channel": action["channel"], "delivered": True}

    # --- chain reads ------------------------------------------------------------------

    async def node(self, network: str, secrets: Secrets) -> RpcPool:
        """The endpoints of ``network``; their URLs (which may carry API keys) are hidden
        in ``secrets``, so an error quoting one is scrubbed."""
        project = self.runtime.project
        spec = project.networks.get(network) if project else None
        if spec is None:
            raise RflowError(FailureKind.INVALID_INPUT, f"unknown network {network!r}")
        secrets.hide(*(variable for _, variable in spec.rpc_env_names(network)))
        try:
            return await self.runtime.rpc.get(network)
        except LookupError as exc:
            # The message names the network and the variable that is not set.
            raise RflowError(FailureKind.INVALID_INPUT, str(exc.args[0])) from None

    async def _ask(self, network: str, secrets: Secrets, method: str, *params: Any) -> Any:
        """``method`` on ``network``'s endpoints (failing over): its result. No answer is
        ``rpc_timeout``; a node over its rate limit ``rate_limited``."""
        node = await self.node(network, secrets)
        try:
            return await node.call(method, *params)
        except RpcUnavailable as exc:
            raise RflowError(FailureKind.RPC_TIMEOUT, f"{method}: {exc}") from None
        except RpcError as exc:
            if exc.code == RPC_LIMIT_EXCEEDED:
                raise RflowError(FailureKind.RATE_LIMITED, str(exc)) from None
            raise

    def address_of(self, action: Mapping[str, Any]) -> str:
        if action.get("to"):
            return to_checksum_address(action["to"])
        project = self.runtime.project
        contract = project.contracts.get(action["contract"]) if project else None
        address = contract.address.get(action["network"]) if contract else None
        if address is None:
            raise RflowError(
                FailureKind.INVALID_INPUT,
                f"contract {action.get('contract')!r} has no address on {action['network']}",
            )
        return to_checksum_address(address)

    async def read(self, effect: Execute, secrets: Secrets) -> Any:
        action = secrets.resolve(effect.action)
        signature = parse_signature(action["function"])
        selector = function_signature_to_4byte_selector(
            f"{signature.name}({','.join(signature.inputs)})"
        )
        args = [
            _abi_arg(kind, value)
            for kind, value in zip(signature.inputs, action.get("args") or [], strict=True)
        ]
        data = selector + abi_encode(list(signature.inputs), args)
        block = action.get("block", "latest")
        call = {"to": self.address_of(action), "data": "0x" + data.hex()}
        try:
            answer = await self._ask(
                action["network"],
                secrets,
                "eth_call",
                call,
                hex(block) if isinstance(block, int) else block,
            )
        except RpcError as exc:  # the node answered: the call itself failed
            raise RflowError(
                FailureKind.REVERTED,
                f"{action['function']} reverted: {revert_reason(exc.data) or exc.message}",
            ) from None
        raw = bytes.fromhex(str(answer).removeprefix("0x"))
        if not signature.outputs:
            return "0x" + bytes(raw).hex()
        values = abi_decode(list(signature.outputs), bytes(raw))
        decoded = [_jsonable(v) for v in values]
        return decoded[0] if len(decoded) == 1 else decoded

    async def query(self, effect: Execute, secrets: Secrets) -> Any:
        action = secrets.resolve(effect.action)
        try:
            result = await self._ask(
                action["network"], secrets, action["method"], *(action.get("params") or [])
            )
        except RpcError as exc:
            raise RflowError(FailureKind.DATA_UNAVAILABLE, str(exc)) from None
        return _jsonable(result)

    # --- state, sends, commands -------------------------------------------------------

    async def state(self, effect: Execute, secrets: Secrets) -> dict[str, Any]:
        # Stored as rendered: a state value never holds a placeholder to fill in.
        async def apply(conn):
            return await workflow_state.apply(
                conn,
                workflow=effect.workflow,
                op_key=effect.key,
                kind=effect.kind,
                action=effect.action,
            )

        return await self.runtime.database.run(apply, what=f"{effect.kind} of {effect.workflow}")

    async def send_transaction(self, effect: Execute, secrets: Secrets) -> Any:
        raise RflowError(
            FailureKind.PERMISSION_DENIED,
            "this worker has no relayer: send_transaction steps need the relayer agent",
        )

    async def command(self, effect: Execute, secrets: Secrets) -> Any:
        """Run a declared executable: no shell, ``args`` as JSON on stdin, JSON on stdout.

        The command sees only the environment variables its declaration lists, plus
        RFLOW_IDEMPOTENCY_KEY so it can deduplicate a step re-run after a crash; their
        values are scrubbed from what it prints.
        """
        action = secrets.resolve(effect.action)
        name = action["name"]
        project = self.runtime.project
        spec = project.commands.get(name) if project else None
        if spec is None:
            raise RflowError(
                FailureKind.INVALID_INPUT, f"command {name!r} is not declared under commands"
            )
        executable = spec.path if "/" in spec.path else shutil.which(spec.path)
        if executable is None:
            raise RflowError(
                FailureKind.INVALID_INPUT, f"command {name!r}: {spec.path} is not on PATH"
            )
        env = {var: self.runtime.env[var] for var in spec.env if var in self.runtime.env}
        secrets.hide(*env)
        env["RFLOW_IDEMPOTENCY_KEY"] = effect.key
        process = await asyncio.create_subprocess_exec(
            executable,
            *spec.args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        stdin = json.dumps(action.get("args"))
        try:
            stdout, stderr = await asyncio.wait_for(
                process.communicate(stdin), spec.timeout.total_seconds()
            )
        except TimeoutError:
            process.kill()
            await process.wait()
            raise RflowError(
                FailureKind.TIMEOUT, f"command {name!r} ran longer than {spec.timeout}"
            ) from None
        if process.returncode != 0:
            tail = stderr[-MAX_QUOTED_BYTES:].decode("utf-8", "replace")
            detail = secrets.scrub(tail)[-500:].strip()
            raise RflowError(
                FailureKind.ASSERT_FAILED,
                f"command {name!r} exited with {process.returncode}: {detail}",
            )
        if not stdout.strip():
            return None
        try:
            return json.loads(stdout[:MAX_BODY])
        except json.JSONDecodeError:
            raise RflowError(
                FailureKind.ASSERT_FAILED, f"command {name!r} printed something that is not JSON"
            ) from None


def _secret(env: Mapping[str, str], name: str, default: str | None = None) -> str:
    value = env.get(name) or default
    if not value:
        raise RflowError(FailureKind.INVALID_INPUT, f"environment variable {name} is not set")
    return value


def _abi_arg(kind: str, value: Any) -> Any:
    if kind.startswith(("uint", "int")) and isinstance(value, str):
        return int(value, 0)
    if kind == "address" and isinstance(value, str):
        return to_checksum_address(value)
    if kind.startswith("bytes") and isinstance(value, str):
        return bytes.fromhex(value.removeprefix("0x"))
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if hasattr(value, "hex") and not isinstance(value, (int, str)):
        return "0x" + value.hex().removeprefix("0x")
    return value


def _seconds(duration: str) -> float:
    """An ``http_call.timeout`` as written in the step's input (``10s``), in seconds."""
    return parse_duration(duration).total_seconds()

"""Filling placeholders in for an effect, and scrubbing the values out of its results."""

from __future__ import annotations

import base64
import json
import logging
from urllib.parse import quote

import pytest

from rflow.failures import FailureKind, RflowError, StepError
from rflow.secrets import (
    MIN_SCRUBBED,
    Secrets,
    placeholders,
    process_secrets,
    redact_url,
    scrub_logs,
    url_secrets,
)

ENV = {
    "API_TOKEN": "tok-5ecr3t-77",
    "API_TOKEN_LONG": "tok-5ecr3t-77-and-more",
    "QUOTED": 'a"b\\c/d e',
    "SHORT": "abc",
    "EMPTY": "",
}


def test_resolve_fills_placeholders_in_and_reads_escapes() -> None:
    secrets = Secrets(ENV)
    action = {
        "url": "https://api.test/${API_TOKEN}",
        "headers": {"${API_TOKEN}": "x $${API_TOKEN}"},
        "body": [{"n": 1, "d": "${MISSING:-none}"}, None, True],
    }
    assert secrets.resolve(action) == {
        "url": "https://api.test/tok-5ecr3t-77",
        "headers": {"tok-5ecr3t-77": "x ${API_TOKEN}"},
        "body": [{"n": 1, "d": "none"}, None, True],
    }
    assert secrets.used == {"API_TOKEN": "tok-5ecr3t-77"}


def test_a_variable_this_worker_lacks_fails_the_effect() -> None:
    with pytest.raises(RflowError) as caught:
        Secrets(ENV).resolve({"url": "https://api.test/${NOPE}"})
    assert caught.value.kind == FailureKind.INVALID_INPUT
    assert caught.value.message == (
        "on this worker: environment variable NOPE is not set "
        "(write ${NOPE:-default} to give a default)"
    )


def test_scrub_writes_every_value_back_as_its_placeholder() -> None:
    secrets = Secrets(ENV)
    secrets.resolve("${API_TOKEN} ${API_TOKEN_LONG} ${QUOTED}")
    echoed = {
        "body": json.dumps({"auth": "Bearer tok-5ecr3t-77", "q": ENV["QUOTED"]}),
        "headers": {"tok-5ecr3t-77-and-more": "x"},
        "path": "/hook/" + quote(ENV["QUOTED"], safe=""),
        "n": 77,
    }
    assert secrets.scrub(echoed) == {
        "body": '{"auth": "Bearer ${API_TOKEN}", "q": "${QUOTED}"}',
        # The longer value wins where one contains the other.
        "headers": {"${API_TOKEN_LONG}": "x"},
        "path": "/hook/${QUOTED}",
        "n": 77,
    }


def test_scrubbing_ignores_case() -> None:
    # A recipient written in lower case comes back checksummed from the chain.
    wallet = "0x71c7656ec7ab88b098defb751b7401b5f6d8976f"
    secrets = Secrets({"COLD_WALLET": wallet}).hide("COLD_WALLET")
    checksummed = "0x71C7656EC7ab88b098defB751B7401B5f6d8976F"
    assert secrets.scrub({"tx": {"to": checksummed}}) == {"tx": {"to": "${COLD_WALLET}"}}


def test_hidden_values_are_scrubbed_without_being_placeholders() -> None:
    secrets = Secrets(ENV).hide("API_TOKEN", "NOT_SET")
    assert (
        secrets.scrub("GET https://x/tok-5ecr3t-77 failed") == "GET https://x/${API_TOKEN} failed"
    )
    found = Secrets(ENV).hide_found_in("https://hooks.test/tok-5ecr3t-77/in")
    assert set(found.used) == {"API_TOKEN"}
    error = StepError(kind=FailureKind.DATA_UNAVAILABLE, message="POST tok-5ecr3t-77: 500")
    assert found.scrub_error(error) == StepError(
        kind=FailureKind.DATA_UNAVAILABLE, message="POST ${API_TOKEN}: 500"
    )
    assert found.scrub_error(None) is None


def test_values_too_short_to_tell_apart_are_scrubbed_only_where_they_stand_alone() -> None:
    assert len(ENV["SHORT"]) < MIN_SCRUBBED
    secrets = Secrets(ENV)
    assert secrets.resolve("${SHORT}${EMPTY}") == "abc"
    assert (
        secrets.scrub("abc abcdef xabc ab-abc/ABC.") == "${SHORT} abcdef xabc ab-${SHORT}/${SHORT}."
    )
    assert Secrets(ENV).scrub("tok-5ecr3t-77") == "tok-5ecr3t-77"  # nothing handed over
    # A short value is never looked for in a channel's texts: it would be found anywhere.
    assert Secrets({"ONE": "1"}).hide_found_in("http://127.0.0.1/x").used == {}


def test_a_path_segment_equal_to_a_secret_is_scrubbed_however_short() -> None:
    secrets = Secrets({"KEY": "k3y", "LONG": "hook-token-991"}).hide("KEY", "LONG")
    assert secrets.scrub("POST https://api.test/v1/k3y/items?x=k3yboard") == (
        "POST https://api.test/v1/${KEY}/items?x=k3yboard"
    )
    assert secrets.scrub("https://hooks.test/hook-token-991/in") == "https://hooks.test/${LONG}/in"


def test_placeholders_lists_the_variables_an_input_names() -> None:
    action = {"to": "${WALLET}", "args": ["${{ x }}", {"${KEY}": "$${NOT} ${WALLET}"}]}
    assert placeholders(action) == ("KEY", "WALLET")
    assert placeholders({"n": 1}) == ()


# --- URLs, Base64 and whole processes ----------------------------------------------

RPC = "https://rpcuser:pa55-w0rd@mainnet.infura.io/v3/0123456789abcdef0123456789abcdef?apikey=q1"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (RPC, "https://mainnet.infura.io/…"),
        ("https://mainnet.infura.io/v3/KEY", "https://mainnet.infura.io/…"),
        ("http://user:KEY@127.0.0.1:8545", "http://127.0.0.1:8545/…"),
        ("http://127.0.0.1:8545", "http://127.0.0.1:8545"),
        ("http://127.0.0.1:8545/", "http://127.0.0.1:8545"),
        ("WSS://Node.example:443/ws#frag", "wss://node.example:443/…"),
        ("http://[::1]:8545/key", "http://[::1]:8545/…"),
        ("not a url", "…"),
        ("sk-live-1234", "…"),
        ("http://host:99999999/", "…"),  # a port no URL has: shown as nothing at all
    ],
)
def test_a_url_is_shown_as_its_scheme_and_host(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_the_parts_of_a_url_that_can_carry_a_key() -> None:
    assert set(url_secrets(RPC)) == {
        "rpcuser",
        "pa55-w0rd",
        "rpcuser:pa55-w0rd",
        "apikey=q1",
        "q1",  # short, but under a name that says key
        "0123456789abcdef0123456789abcdef",
    }
    # 'v3', 'rpc' and a plain word are no keys; a segment with letters and digits is.
    assert url_secrets("https://h/v3/rpc/mainnet/abc1") == ("abc1",)
    assert url_secrets("https://h/x?page=10&q=ab") == ("page=10&q=ab",)
    # A database URL: only its password (the user, the database's name are no secrets).
    assert set(url_secrets("postgresql://rflow:pw%40x@db/rflow", credentials_only=True)) == {
        "pw%40x",
        "pw@x",
        "rflow:pw%40x",
        "rflow:pw@x",
    }


def test_a_url_variable_is_shown_as_scheme_and_host_and_its_parts_are_scrubbed() -> None:
    secrets = Secrets({"RFLOW_RPC_URL_MAINNET": RPC}).hide("RFLOW_RPC_URL_MAINNET")
    key = "0123456789abcdef0123456789abcdef"
    basic = base64.b64encode(b"rpcuser:pa55-w0rd").decode()
    message = (
        f"POST {RPC} failed; ws {'wss' + RPC[5:]} closed; 401 for /v3/{key.upper()} "
        f"(Authorization: Basic {basic}, user rpcuser, password pa55-w0rd)"
    )
    assert secrets.scrub(message) == (
        "POST https://mainnet.infura.io/… failed; ws wss://mainnet.infura.io/… closed; "
        "401 for /v3/… (Authorization: Basic …, user …, password …)"
    )


def test_base64_forms_are_scrubbed_even_inside_a_longer_encoding() -> None:
    token = "tok-5ecr3t-77"
    secrets = Secrets(ENV).hide("API_TOKEN")
    for prefix in ("", "a", "ab", "abc:"):  # every alignment in the encoded text
        encoded = base64.b64encode(f"{prefix}{token}:more".encode()).decode()
        assert not _pieces_left(secrets.scrub(f"Basic {encoded}"), token), prefix
    urlsafe = base64.urlsafe_b64encode(b"\xfb\xff" + token.encode()).decode()
    assert not _pieces_left(secrets.scrub(urlsafe), token)


def _pieces_left(text: str, token: str) -> bool:
    """Whether ``text`` still decodes to something holding ``token``."""
    encoded = text.split()[-1]
    for cut in range(4):
        try:
            decoded = base64.b64decode(encoded[cut:] + "===", altchars=b"-_")
        except ValueError:
            continue
        if token.encode() in decoded:
            return True
    return False


def test_process_secrets_hold_every_secret_bearing_setting_and_project_variable() -> None:
    from rflow.lang import validate_text
    from rflow.settings import Settings

    env = {
        "RFLOW_RPC_URL_LOCAL": "http://user:KEY1@127.0.0.1:1/v3/K3Y2",
        "RFLOW_DATABASE_URL": "postgresql://rflow:dbpass-1@127.0.0.1:2/rflow",
        "RFLOW_API_TOKEN": "api-token-1",
        "MAINNET_RPC": "https://node.test/key-abc123",
        "PAY_KEY": "0x" + "11" * 32,
        "HOOK_SECRET": "hook-secret-1",
        "CHANNEL_TOKEN": "chan-token-1",
        "STEP_TOKEN": "step-token-1",
        "UNRELATED": "nothing-secret",
    }
    project = validate_text(
        """
networks:
  mainnet: { chain_id: 1, rpc_url_env: MAINNET_RPC }
  local: { chain_id: 31337 }
relayers:
  pay: { key_env: PAY_KEY, networks: [local] }
channels:
  hook: { type: webhook, url: "https://hooks.test/x", headers: { X-Token: "${CHANNEL_TOKEN}" } }
workflows:
  w:
    trigger:
      webhook: { path: /w, auth: { type: hmac, secret_env: HOOK_SECRET } }
    steps:
      - id: call
        http_call: { url: "https://api.test/", headers: { Authorization: "Bearer ${STEP_TOKEN}" } }
""",
        env,
    ).project
    assert project is not None
    secrets = process_secrets(Settings.from_env(env), project, env)
    text = " ".join(env.values())
    assert secrets.scrub(text) == (
        "http://127.0.0.1:1/… postgresql://127.0.0.1:2/… ${RFLOW_API_TOKEN} "
        "https://node.test/… ${PAY_KEY} ${HOOK_SECRET} ${CHANNEL_TOKEN} ${STEP_TOKEN} "
        "nothing-secret"
    )


def test_every_log_record_is_scrubbed_whatever_logger_writes_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secrets = Secrets({"RFLOW_RPC_URL_X": RPC}).hide("RFLOW_RPC_URL_X")
    scrub_logs(secrets)
    try:
        with caplog.at_level(logging.INFO):
            logging.getLogger("some.library").info("connecting to %s", RPC)
            try:
                raise ConnectionError(f"cannot reach {RPC}")
            except ConnectionError:
                logging.getLogger("rflow.x").exception("failed")
    finally:
        scrub_logs(None)
    text = caplog.text
    assert "pa55-w0rd" not in text and "0123456789abcdef" not in text and "rpcuser" not in text
    assert "connecting to https://mainnet.infura.io/…" in text
    assert "ConnectionError: cannot reach https://mainnet.infura.io/…" in text
    with caplog.at_level(logging.INFO):
        logging.getLogger("x").info("after %s", "pa55-w0rd")
    assert "after pa55-w0rd" in caplog.text  # scrubbing stopped


def test_a_url_the_input_named_reads_as_its_placeholder_and_its_parts_stay_hidden() -> None:
    secrets = Secrets({"API_URL": RPC, "RFLOW_RPC_URL_MAINNET": RPC + "&x=1"})
    assert secrets.resolve({"url": "${API_URL}"}) == {"url": RPC}
    secrets.hide("RFLOW_RPC_URL_MAINNET")
    key = "0123456789abcdef0123456789abcdef"
    message = f"HTTP 500 from {RPC}; retry {RPC}&x=1 as rpcuser, key {key}"
    # The value the step's input named reads as written there; one it did not name (a
    # process setting) as scheme and host; each part that carries a key stays hidden alone.
    assert secrets.scrub(message) == (
        "HTTP 500 from ${API_URL}; retry https://mainnet.infura.io/… as …, key …"
    )


def test_process_secrets_hide_each_ingress_key_and_the_kafka_credentials() -> None:
    from rflow.settings import Settings

    first, second = "a1" * 20, "b2" * 20
    env = {
        "RFLOW_INGRESS_KEYS": f"k1:{first},k0:{second}",
        "RFLOW_KAFKA_SASL_PASSWORD": "sasl-pass-1",
        "RFLOW_KAFKA_SSL_KEY_PASSWORD": "key-pass-1",
    }
    secrets = process_secrets(Settings.from_env(env), None, env)
    assert secrets.scrub(f"proof by {first}; old {second}; sasl-pass-1 key-pass-1") == (
        "proof by <ingress key k1>; old <ingress key k0>; "
        "${RFLOW_KAFKA_SASL_PASSWORD} ${RFLOW_KAFKA_SSL_KEY_PASSWORD}"
    )
    assert secrets.scrub(env["RFLOW_INGRESS_KEYS"]) == "${RFLOW_INGRESS_KEYS}"

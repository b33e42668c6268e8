"""Filling placeholders in for an effect, and scrubbing the values out of its results."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from rflow.failures import FailureKind, RflowError, StepError
from rflow.secrets import MIN_SCRUBBED, Secrets, placeholders

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


def test_values_too_short_to_tell_apart_are_not_scrubbed() -> None:
    assert len(ENV["SHORT"]) < MIN_SCRUBBED
    secrets = Secrets(ENV)
    assert secrets.resolve("${SHORT}${EMPTY}") == "abc"
    assert secrets.scrub("abc abcdef") == "abc abcdef"
    assert Secrets(ENV).scrub("tok-5ecr3t-77") == "tok-5ecr3t-77"  # nothing handed over


def test_placeholders_lists_the_variables_an_input_names() -> None:
    action = {"to": "${WALLET}", "args": ["${{ x }}", {"${KEY}": "$${NOT} ${WALLET}"}]}
    assert placeholders(action) == ("KEY", "WALLET")
    assert placeholders({"n": 1}) == ()

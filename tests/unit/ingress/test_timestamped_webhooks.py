"""Timestamped webhook signatures, as Stripe and Slack sign: the time within the
tolerance, the signature over time and body, each signature accepted once."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from rflow.ingress import WebhookIngress, sign
from rflow.ingress.auth import Signed, authenticate, sign_timestamped
from rflow.lang.model.triggers import AuthHmac
from tests.unit.ingress.webhook_fakes import NOW, Clock, FakeProducer, MemoryDeliveries, project

SECRET = "whsec_test"
T = int(NOW.timestamp())
BODY = json.dumps({"type": "invoice.paid", "id": "in_1"}).encode()

# Slack's example in "Verifying requests from Slack".
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
SLACK_TIME = 1531420618
SLACK_BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id="
    b"G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-"
    b"collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F3977008"
    b"85554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c4"
    b"47fce8b6703c"
)
SLACK_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"

SLACK = AuthHmac(
    type="hmac",
    secret_env="SLACK_SECRET",
    header="X-Slack-Signature",
    timestamp_header="X-Slack-Request-Timestamp",
    signed_string="v0:{timestamp}:{body}",
    signature_prefix="v0=",
)
STRIPE = AuthHmac(
    type="hmac",
    secret_env="HOOK_SECRET",
    header="Stripe-Signature",
    timestamp_header="Stripe-Signature",
    signature_prefix="v1=",
)


def stripe_header(body: bytes = BODY, at: int = T, secret: str = SECRET) -> str:
    return f"t={at},v1={sign_timestamped(secret, body, at)},v0=ignored"


def test_slack_documentation_vector():
    assert "v0=" + sign_timestamped(
        SLACK_SECRET, SLACK_BODY, SLACK_TIME, signed_string="v0:{timestamp}:{body}"
    ) == (SLACK_SIGNATURE)
    headers = {
        "x-slack-signature": SLACK_SIGNATURE,
        "x-slack-request-timestamp": str(SLACK_TIME),
    }
    at = datetime.fromtimestamp(SLACK_TIME + 30, UTC)
    passed = authenticate(
        SLACK, headers, SLACK_BODY, {"SLACK_SECRET": SLACK_SECRET}, workflow="w", now=at
    )
    assert passed == Signed(SLACK_SIGNATURE[3:], datetime.fromtimestamp(SLACK_TIME + 300, UTC))


def refusal(auth, headers, body=BODY, now=NOW) -> tuple[int, str]:
    env = {"HOOK_SECRET": SECRET, "SLACK_SECRET": SLACK_SECRET}
    answer = authenticate(auth, headers, body, env, workflow="w", now=now)
    assert not isinstance(answer, Signed), answer
    return answer.status, answer.body["error"]


def test_a_stripe_header_carries_time_and_signatures():
    passed = authenticate(
        STRIPE,
        {"stripe-signature": stripe_header()},
        BODY,
        {"HOOK_SECRET": SECRET},
        workflow="w",
        now=NOW,
    )
    assert isinstance(passed, Signed)
    assert passed.expires_at == NOW + timedelta(minutes=5)
    # Several v1 signatures (a secret being rolled): any one that matches will do.
    rolled = f"t={T},v1={'0' * 64},v1={sign_timestamped(SECRET, BODY, T)}"
    assert isinstance(
        authenticate(
            STRIPE,
            {"stripe-signature": rolled},
            BODY,
            {"HOOK_SECRET": SECRET},
            workflow="w",
            now=NOW,
        ),
        Signed,
    )


def test_each_refusal_says_why():
    assert refusal(STRIPE, {}) == (401, "missing Stripe-Signature header")
    assert refusal(STRIPE, {"stripe-signature": "v1=abc"}) == (
        401,
        "Stripe-Signature has no t=<Unix time in seconds>",
    )
    assert refusal(STRIPE, {"stripe-signature": "t=soon,v1=abc"}) == (
        401,
        "the t= of Stripe-Signature must be a Unix time in seconds",
    )
    assert refusal(STRIPE, {"stripe-signature": f"t={T},v2=abc"}) == (
        401,
        "Stripe-Signature must hold v1=<hex digest of the signed string>",
    )
    forged = stripe_header(secret="guess")
    assert refusal(STRIPE, {"stripe-signature": forged}) == (401, "signature does not match")
    # The body is part of what is signed, and so is the time.
    assert refusal(STRIPE, {"stripe-signature": stripe_header()}, body=BODY + b" ") == (
        401,
        "signature does not match",
    )
    moved = stripe_header().replace(f"t={T}", f"t={T + 1}", 1)
    assert refusal(STRIPE, {"stripe-signature": moved}) == (401, "signature does not match")
    slack_headers = {"x-slack-signature": SLACK_SIGNATURE}
    assert refusal(SLACK, slack_headers) == (401, "missing X-Slack-Request-Timestamp header")


def test_a_delivery_outside_the_tolerance_is_refused_either_way():
    old = stripe_header(at=T - 301)
    assert refusal(STRIPE, {"stripe-signature": old}) == (
        401,
        "the delivery was signed 301s ago, outside the tolerance of 5m: a late or replayed "
        "delivery is refused",
    )
    ahead = stripe_header(at=T + 400)
    assert refusal(STRIPE, {"stripe-signature": ahead})[1].startswith(
        "the delivery was signed 400s ahead of this clock"
    )
    within = stripe_header(at=T - 300)
    assert isinstance(
        authenticate(
            STRIPE,
            {"stripe-signature": within},
            BODY,
            {"HOOK_SECRET": SECRET},
            workflow="w",
            now=NOW,
        ),
        Signed,
    )


PROJECT = project(
    """
    workflows:
      invoices:
        triggers:
          - webhook:
              path: /hooks/stripe
              auth:
                type: hmac
                secret_env: HOOK_SECRET
                header: Stripe-Signature
                timestamp_header: Stripe-Signature
                signature_prefix: "v1="
                tolerance: 2m
          - webhook:
              path: /hooks/github
              auth: { type: hmac, secret_env: HOOK_SECRET }
        steps:
          - id: log
            command: { name: log, args: { message: "${{ trigger.body.id }}" } }
    """
)


class Harness:
    def __init__(self) -> None:
        self.clock = Clock()
        self.producer = FakeProducer()
        self.deliveries = MemoryDeliveries(self.clock)
        self.ingress = WebhookIngress(
            PROJECT, {"HOOK_SECRET": SECRET}, self.producer, self.deliveries, self.clock
        )

    async def post(self, path: str, headers: dict[str, str], body: bytes = BODY):
        reply = await self.ingress.handle(path, headers, body, {})
        return reply.status, reply.body


async def test_a_replayed_timestamped_delivery_is_refused_within_the_tolerance():
    h = Harness()
    header = {"Stripe-Signature": stripe_header()}
    status, body = await h.post("/hooks/stripe", header)
    assert (status, body["accepted"]) == (202, True)
    h.clock.advance(timedelta(seconds=30))
    assert await h.post("/hooks/stripe", header) == (
        401,
        {
            "error": "this signature was used already: a replayed delivery is refused (each "
            "delivery is signed anew, with its own time)"
        },
    )
    # Past the tolerance it is refused for its time, whatever the store remembers.
    h.clock.advance(timedelta(minutes=2))
    status, body = await h.post("/hooks/stripe", header)
    assert status == 401 and "outside the tolerance of 2m" in body["error"]
    # The same event signed anew (Stripe's retry) is a new delivery.
    again = {"Stripe-Signature": stripe_header(at=int(h.clock().timestamp()))}
    assert (await h.post("/hooks/stripe", again))[0] == 202
    assert len(h.producer.records) == 2


async def test_a_delivery_that_fired_nothing_gives_its_signature_back():
    h = Harness()
    header = {"Stripe-Signature": stripe_header()}
    h.producer.fail_next = 1
    assert (await h.post("/hooks/stripe", header))[0] == 503
    # The sender's retry of the same delivery, same signature, is taken.
    assert (await h.post("/hooks/stripe", header))[0] == 202
    assert len(h.producer.records) == 1


async def test_github_style_signatures_work_as_they_did():
    h = Harness()
    headers = {"X-Hub-Signature-256": sign(SECRET, BODY)}
    assert (await h.post("/hooks/github", headers))[0] == 202
    assert (await h.post("/hooks/github", headers))[0] == 202  # no time: nothing to replay
    assert h.deliveries.signatures == {}
    assert [r.trigger_key.split(":")[0] for r in h.producer.records] == [
        "webhook@webhook-2",
        "webhook@webhook-2",
    ]


@pytest.mark.parametrize(
    ("auth", "message"),
    [
        ("{ type: hmac, secret_env: S, tolerance: 1m }", "tolerance apply to a timestamped"),
        (
            "{ type: hmac, secret_env: S, timestamp_header: T, signed_string: '{body}' }",
            "signed_string must hold {timestamp} once",
        ),
        ("{ type: hmac, secret_env: S, timestamp_header: T, tolerance: 2h }", "between 1s and 1h"),
    ],
)
def test_timestamped_fields_are_checked(auth, message):
    from rflow.lang import validate_text

    report = validate_text(
        "workflows:\n  w:\n    trigger: { webhook: { path: /h, auth: "
        + auth
        + " } }\n    steps: [{ id: a, command: { name: log, args: { message: hi } } }]\n",
        {"S": "x"},
    )
    assert any(message in d.message for d in report.diagnostics), [
        str(d) for d in report.diagnostics
    ]

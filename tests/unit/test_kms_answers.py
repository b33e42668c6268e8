"""The KMS signer's request and answer handling, against recorded KMS answers served on
127.0.0.1: what it sends, how a DER signature with a high s becomes a usable one, and
which refusals mean "try again" (``signer_unavailable``) or "no" (``permission_denied``).
The real exchange with a KMS that signs is tests/integration/test_signers.py's."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from asn1crypto.algos import DSASignature
from asn1crypto.keys import ECDomainParameters, PublicKeyAlgorithm, PublicKeyInfo
from coincurve import PrivateKey
from eth_keys import keys as eth_keys

from rflow.failures import FailureKind, RflowError
from rflow.lang.model import AwsKmsKey
from rflow.relayer import kms
from rflow.relayer.signing import HALF_N, SECP256K1_N, Signer

KEY = PrivateKey()
ENV = {"KMS_URL": "", "AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "not-shown"}


def spki(point: bytes, curve: str = "secp256k1") -> str:
    info = PublicKeyInfo(
        {
            "algorithm": PublicKeyAlgorithm(
                {"algorithm": "ec", "parameters": ECDomainParameters(name="named", value=curve)}
            ),
            "public_key": point,
        }
    )
    return base64.b64encode(info.dump()).decode()


PUBLIC = {
    "KeyId": "arn:aws:kms:eu-west-1:111122223333:key/k",
    "KeySpec": "ECC_SECG_P256K1",
    "KeyUsage": "SIGN_VERIFY",
    "PublicKey": spki(KEY.public_key.format(compressed=False)),
    "SigningAlgorithms": ["ECDSA_SHA_256"],
}


class Kms:
    """Answers each action with the next recorded answer given for it; keeps requests."""

    def __init__(self) -> None:
        self.answers: dict[str, list[tuple[int, dict]]] = {}
        self.requests: list[tuple[dict[str, str], dict]] = []

    def will(self, action: str, status: int, body: dict) -> None:
        self.answers.setdefault(action, []).append((status, body))

    async def handle(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        self.requests.append((dict(request.headers), body))
        action = request.headers["X-Amz-Target"].removeprefix("TrentService.")
        if action == "Sign" and not self.answers.get("Sign"):
            signature = KEY.sign_recoverable(base64.b64decode(body["Message"]), hasher=None)
            r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:64], "big")
            der = DSASignature({"r": r, "s": SECP256K1_N - s}).dump()  # a high s, as KMS may
            return web.json_response({"Signature": base64.b64encode(der).decode()})
        status, answer = self.answers[action].pop(0)
        return web.json_response(answer, status=status)


@pytest.fixture
async def server() -> AsyncIterator[Kms]:
    recorded = Kms()
    app = web.Application()
    app.router.add_post("/", recorded.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    ENV["KMS_URL"] = f"http://127.0.0.1:{port}/"
    yield recorded
    await runner.cleanup()


SPEC = AwsKmsKey(key_id="alias/payout", region="eu-west-1", endpoint_env="KMS_URL")


async def test_it_asks_for_the_public_key_then_signs_digests_low_s(server):
    server.will("GetPublicKey", 200, PUBLIC)
    signer = Signer("vault", await kms.open_key("vault", SPEC, ENV))
    digest = bytes(range(32))
    signature = await signer.sign_digest(digest)
    assert signature.s <= HALF_N
    recovered = eth_keys.Signature(vrs=(signature.v, signature.r, signature.s))
    assert (
        recovered.recover_public_key_from_msg_hash(digest).to_checksum_address() == signer.address
    )
    (first_headers, first), (headers, sign) = server.requests
    assert first == {"KeyId": "alias/payout"}
    assert first_headers["X-Amz-Target"] == "TrentService.GetPublicKey"
    assert sign == {
        "KeyId": "alias/payout",
        "Message": base64.b64encode(digest).decode(),
        "MessageType": "DIGEST",
        "SigningAlgorithm": "ECDSA_SHA_256",
    }
    assert headers["Content-Type"] == "application/x-amz-json-1.1"
    assert (
        headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDTEST/")
        and "/eu-west-1/kms/aws4_request" in headers["Authorization"]
    )
    assert "not-shown" not in json.dumps(server.requests)
    await signer.close()


@pytest.mark.parametrize(
    ("status", "answer", "kind", "says"),
    [
        (
            400,
            {"__type": "ThrottlingException", "message": "Rate exceeded"},
            "signer_unavailable",
            "ThrottlingException: Rate exceeded",
        ),
        (500, {"__type": "KMSInternalException"}, "signer_unavailable", "KMSInternalException"),
        (503, {}, "signer_unavailable", "HTTP 503"),
        (
            400,
            {"__type": "com.amazonaws.kms#AccessDeniedException", "Message": "not allowed"},
            "permission_denied",
            "AccessDeniedException: not allowed",
        ),
        (
            400,
            {"__type": "DisabledException", "message": "disabled"},
            "permission_denied",
            "DisabledException",
        ),
        (400, {"__type": "NotFoundException"}, "permission_denied", "NotFoundException"),
    ],
)
async def test_refusals_are_sorted_into_try_again_and_no(server, status, answer, kind, says):
    server.will("GetPublicKey", status, answer)
    with pytest.raises(RflowError) as err:
        await kms.open_key("vault", SPEC, ENV)
    assert err.value.kind is FailureKind(kind)
    assert says in err.value.message and "not-shown" not in err.value.message


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ({**PUBLIC, "KeySpec": "ECC_NIST_P256"}, "is a ECC_NIST_P256 key for SIGN_VERIFY"),
        ({**PUBLIC, "KeyUsage": "ENCRYPT_DECRYPT"}, "for ENCRYPT_DECRYPT"),
        (
            {**PUBLIC, "PublicKey": spki(b"\x04" + b"\x01" * 64, "secp256r1")},
            "not answer a secp256k1",
        ),
        ({**PUBLIC, "PublicKey": "bm90IERFUg=="}, "not answer a secp256k1"),
    ],
)
async def test_a_key_that_is_not_secp256k1_for_signing_is_refused(server, answer, says):
    server.will("GetPublicKey", 200, answer)
    with pytest.raises(RflowError, match=says) as err:
        await kms.open_key("vault", SPEC, ENV)
    assert err.value.kind is FailureKind.PERMISSION_DENIED


async def test_a_signature_of_something_else_or_not_der_is_refused(server):
    server.will("GetPublicKey", 200, PUBLIC)
    key = await kms.open_key("vault", SPEC, ENV)
    other = PrivateKey().sign(b"x" * 32, hasher=None)  # DER, by another key
    server.will("Sign", 200, {"Signature": base64.b64encode(other).decode()})
    with pytest.raises(RflowError, match="does not recover to the key's public key"):
        await key.sign_digest(b"x" * 32)
    server.will("Sign", 200, {"Signature": "AAEC"})
    with pytest.raises(RflowError, match="did not answer a DER ECDSA signature"):
        await key.sign_digest(b"x" * 32)
    server.will("Sign", 400, {"__type": "ThrottlingException"})
    with pytest.raises(RflowError) as err:
        await key.sign_digest(b"x" * 32)
    assert err.value.kind is FailureKind.SIGNER_UNAVAILABLE
    await key.close()

"""Relayer signers on a real HSM (SoftHSM through PKCS#11) and a real KMS (local-kms over
its HTTP API, signed with SigV4): addresses from public keys, low-s signatures that
recover to them, secrets that stay out of sight, and payouts through each on anvil."""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import pickle
import sys
from pathlib import Path

import pytest
from eth_account import Account
from eth_keys import keys as eth_keys

from rflow import storage
from rflow.failures import FailureKind, RflowError
from rflow.lang import Project, validate_path, validate_text
from rflow.relayer import kms, pkcs11
from rflow.relayer.signing import HALF_N, Signer, open_signer
from rflow.storage import sends
from tests.integration import chain
from tests.integration.harness import wait_until
from tests.integration.signers import (
    PIN,
    Hsm,
    LocalKms,
    local_kms,
    softhsm,
    start_local_kms,
    stop,
)
from tests.integration.test_runs import fire, settled_run
from tests.integration.test_sends import sends_of

DIGESTS = 300


@pytest.fixture(scope="module")
def hsm(tmp_path_factory) -> Hsm:
    with softhsm(tmp_path_factory.mktemp("softhsm")) as made:
        yield made


@pytest.fixture(scope="module")
def kms_server(tmp_path_factory) -> LocalKms:
    with local_kms(tmp_path_factory.mktemp("local-kms")) as server:
        yield server


def recovers_to(digest: bytes, v: int, r: int, s: int) -> str:
    """The address a signature of ``digest`` recovers to (eth_keys, not rflow's code)."""
    signature = eth_keys.Signature(vrs=(v, r, s))
    return signature.recover_public_key_from_msg_hash(digest).to_checksum_address()


async def check_many_digests(signer: Signer) -> None:
    for _ in range(DIGESTS):
        digest = os.urandom(32)
        signature = await signer.sign_digest(digest)
        assert signature.s <= HALF_N and signature.v in (0, 1)
        assert recovers_to(digest, signature.v, signature.r, signature.s) == signer.address


async def signed_transfer_recovers(signer: Signer) -> None:
    raw, tx_hash = await signer.sign(
        chain_id=31337,
        nonce=7,
        to=Account.create().address,
        value=10**15,
        data=b"",
        gas=21000,
        max_fee_per_gas=2 * 10**9,
        max_priority_fee_per_gas=10**9,
    )
    assert Account.recover_transaction(raw) == signer.address
    assert tx_hash.startswith("0x") and len(tx_hash) == 66


# --- PKCS#11 --------------------------------------------------------------------------


async def test_an_hsm_key_signs_low_s_and_every_signature_recovers_its_address(hsm):
    address = hsm.make_key("many")
    key = await pkcs11.open_key("vault", hsm.spec("many"), {"HSM_PIN": PIN})
    signer = Signer("vault", key)
    assert signer.address == address and signer.kind == "pkcs11"
    await check_many_digests(signer)
    await signed_transfer_recovers(signer)
    # SoftHSM's own s is high half the time: the normalization above really ran.
    high = sum(key._raw(os.urandom(32))[1] > HALF_N for _ in range(64))
    assert 0 < high < 64
    await signer.close()


async def test_an_imported_key_keeps_its_address_and_the_token_never_gives_it_back(hsm):
    from pkcs11 import Attribute, AttributeSensitive, ObjectClass

    account = Account.create()
    assert hsm.make_key("imported", secret=bytes(account.key)) == account.address
    signer = await open_signer(
        project_with(vault=("pkcs11", hsm.yaml("imported"))), "vault", {"HSM_PIN": PIN}
    )
    assert signer.address == account.address
    await signed_transfer_recovers(signer)
    with pytest.raises(RflowError, match="exists already"):
        hsm.make_key("imported")
    key = pkcs11._session(hsm.spec("imported"), pkcs11.SecretStr(PIN), "vault").get_key(
        object_class=ObjectClass.PRIVATE_KEY, label="imported"
    )
    assert key[Attribute.SENSITIVE] and not key[Attribute.EXTRACTABLE]
    with pytest.raises(AttributeSensitive):
        key[Attribute.VALUE]


async def test_hsm_keys_that_cannot_sign_as_declared_are_refused_by_name(hsm):
    env = {"HSM_PIN": PIN}
    with pytest.raises(RflowError, match="no private key labelled 'absent'") as err:
        await pkcs11.open_key("vault", hsm.spec("absent"), env)
    assert err.value.kind is FailureKind.PERMISSION_DENIED
    with pytest.raises(RflowError, match="no token with this label"):
        await pkcs11.open_key("vault", hsm.spec("any", token="nowhere"), env)
    with pytest.raises(RflowError, match="HSM_PIN"):
        await pkcs11.open_key("vault", hsm.spec("many"), {})
    other = hsm.make_key("someone")
    declared = project_with(Account.create().address, vault=("pkcs11", hsm.yaml("someone")))
    with pytest.raises(RflowError, match=f"signs for {other}, not the declared address"):
        await open_signer(declared, "vault", env)


async def test_a_refused_pin_is_named_never_shown_and_never_tried_again(hsm, caplog):
    caplog.set_level(logging.DEBUG)
    wrong = "99999999"
    for _ in range(2):
        with pytest.raises(RflowError) as err:
            await pkcs11.open_key("vault", hsm.spec("k", token="spare"), {"HSM_PIN": wrong})
        assert err.value.kind is FailureKind.PERMISSION_DENIED
        assert "PIN was refused" in err.value.message and wrong not in err.value.message
    assert wrong not in caplog.text
    # A token counts wrong PINs and locks: the second refusal came from memory. The right
    # PIN with the same module and token is not tried by this process either.
    with pytest.raises(RflowError, match="not tried again"):
        await pkcs11.open_key("vault", hsm.spec("k", token="spare"), {"HSM_PIN": PIN})


# --- AWS KMS --------------------------------------------------------------------------


async def test_a_kms_key_signs_low_s_and_every_signature_recovers_its_address(kms_server):
    key_id = await kms_server.create_key()
    signer = await open_signer(
        project_with(vault=("aws_kms", kms_server.yaml(key_id))), "vault", kms_server.env
    )
    assert signer.kind == "aws_kms"
    await check_many_digests(signer)
    await signed_transfer_recovers(signer)
    alias = await kms_server.create_key(alias="payout")
    by_alias = await open_signer(
        project_with(vault=("aws_kms", kms_server.yaml(alias))), "vault", kms_server.env
    )
    assert by_alias.address != signer.address
    await signed_transfer_recovers(by_alias)
    await signer.close()
    await by_alias.close()


async def test_kms_keys_that_cannot_sign_are_refused_and_a_silent_kms_is_unavailable(
    kms_server,
):
    env = kms_server.env
    p256 = await kms_server.create_key("ECC_NIST_P256")
    with pytest.raises(RflowError, match="a relayer needs an ECC_SECG_P256K1 key") as err:
        await kms.open_key("vault", kms_server.spec(p256), env)
    assert err.value.kind is FailureKind.PERMISSION_DENIED
    with pytest.raises(RflowError, match="NotFoundException") as err:
        await kms.open_key("vault", kms_server.spec("alias/nobody"), env)
    assert err.value.kind is FailureKind.PERMISSION_DENIED
    closed = {**env, "KMS_URL": f"http://127.0.0.1:{chain.free_port()}/"}
    with pytest.raises(RflowError, match="GetPublicKey failed") as err:
        await kms.open_key("vault", kms_server.spec(p256), closed)
    assert err.value.kind is FailureKind.SIGNER_UNAVAILABLE
    with pytest.raises(RflowError, match="AWS credentials not set: AWS_SECRET_ACCESS_KEY"):
        await kms.open_key(
            "vault", kms_server.spec(p256), {k: v for k, v in env.items() if "SECRET" not in k}
        )


# --- secrets --------------------------------------------------------------------------


async def test_no_signer_shows_or_gives_away_a_key_pin_or_credential(hsm, kms_server, caplog):
    caplog.set_level(logging.DEBUG)
    local = Account.create()
    hsm.make_key("secretive")
    key_id = await kms_server.create_key()
    env = {"HSM_PIN": PIN, "LOCAL_KEY": local.key.hex(), **kms_server.env}
    secrets = [PIN, local.key.hex().removeprefix("0x"), env["AWS_SECRET_ACCESS_KEY"]]
    project = project_with(
        vault=("pkcs11", hsm.yaml("secretive")),
        cloud=("aws_kms", kms_server.yaml(key_id)),
        local=("key_env", "LOCAL_KEY"),
    )
    for name in ("vault", "cloud", "local"):
        signer = await open_signer(project, name, env)
        await signer.sign_digest(os.urandom(32))
        key = signer._key
        shown = " ".join([repr(signer), str(signer), repr(key), str(vars(type(key)))])
        assert not [s for s in secrets if s in shown], shown
        for thing in (signer, key, *([key._credentials] if name == "cloud" else [])):
            with pytest.raises(TypeError, match="never pickled or copied"):
                pickle.dumps(thing)
            with pytest.raises(TypeError):
                copy.deepcopy(thing)
        await signer.close()
    bad = {**env, "LOCAL_KEY": "0x" + "zz" * 32, "AWS_SECRET_ACCESS_KEY": "wrong-secret-value"}
    with pytest.raises(RflowError) as err:
        await open_signer(project, "local", bad)
    assert "zz" * 32 not in err.value.message
    assert not [s for s in [*secrets, "wrong-secret-value"] if s in caplog.text]


# --- rflow validate --------------------------------------------------------------------


async def test_validate_refuses_a_declared_address_the_hsm_or_kms_key_does_not_sign_for(
    hsm, kms_server, tmp_path
):
    right = hsm.make_key("declared")
    key_id = await kms_server.create_key()
    wrong = Account.create().address
    path = tmp_path / "project.yaml"
    path.write_text(
        f"""networks:
  local: {{ chain_id: 31337 }}
relayers:
  vault:
    pkcs11: {hsm.yaml("declared")}
    networks: [local]
    address: "{right}"
  cloud:
    aws_kms: {kms_server.yaml(key_id)}
    networks: [local]
    address: "{wrong}"
"""
    )
    env = {**os.environ, "HSM_PIN": PIN, **kms_server.env}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rflow.cli",
        "validate",
        str(path),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output = (await asyncio.wait_for(process.communicate(), 60))[0].decode()
    assert process.returncode == 1, output
    assert f"{path}:11:14: error: relayers.cloud.address: AWS KMS key {key_id}" in output
    assert f"not for the declared address {wrong}" in output
    assert "relayers.vault" not in output
    report = validate_path(path, env)
    assert report.ok  # the language alone does not ask signers; the command does


# --- payouts on anvil -----------------------------------------------------------------


def project_with(address: str | None = None, **relayers: tuple[str, str]) -> Project:
    """A project on network ``local`` whose relayers are ``name=(kind, YAML of the
    signer)``, each declaring ``address`` when given."""
    declared = f", address: '{address}'" if address else ""
    lines = [
        f"  {name}: {{ {kind}: {signer}, networks: [local]{declared} }}"
        for name, (kind, signer) in relayers.items()
    ]
    text = "networks:\n  local: { chain_id: 31337 }\nrelayers:\n" + "\n".join(lines) + "\n"
    report = validate_text(text, {})
    assert report.project is not None, report.diagnostics
    return report.project


PAY = """networks:
  local: {{ chain_id: 31337, confirmations: 0 }}
relayers:
  vault:
    {kind}: {signer}
    networks: [local]
    address: "{address}"
workflows:
  pay:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [vault] }}
    steps:
      - id: pay
        send_transaction: {{ network: local, relayer: vault, to: "${{{{ trigger.to }}}}", value: 12345 wei }}
"""


async def pays_exactly_once(
    settings, worker_factory, tmp_path: Path, w3, kind, signer, address, env
):
    """A run paying through relayer ``vault`` settles with one transfer on chain, sent by
    ``address``."""
    await chain.rpc(w3, "anvil_setBalance", address, hex(10**18))
    path = tmp_path / "project.yaml"
    path.write_text(PAY.format(kind=kind, signer=signer, address=address))
    worker = worker_factory(project_path=path, env=env)
    await worker.wait_ready()
    recipient = Account.create().address
    rid = await fire(settings, path, "pay", f"manual:{kind}", {"to": recipient})
    run = await settled_run(settings, rid, timeout=90)
    assert run["status"] == "succeeded", (run, worker.tail())
    tx = run["steps"][0]["output"]["tx"]
    assert tx["from"].lower() == address.lower()
    mined = await w3.eth.get_transaction(tx["hash"])
    assert mined["from"] == address and mined["value"] == 12345
    assert await w3.eth.get_balance(recipient) == 12345
    assert await w3.eth.get_transaction_count(address) == 1  # exactly one transaction


@pytest.mark.usefixtures("applied_topics", "schema")
async def test_a_workflow_pays_exactly_once_through_an_hsm_backed_relayer(
    settings, worker_factory, tmp_path, w3, hsm
):
    address = hsm.make_key("payout")
    await pays_exactly_once(
        settings,
        worker_factory,
        tmp_path,
        w3,
        "pkcs11",
        hsm.yaml("payout"),
        address,
        {"HSM_PIN": PIN},
    )


@pytest.mark.usefixtures("applied_topics", "schema")
async def test_a_workflow_pays_exactly_once_through_a_kms_backed_relayer(
    settings, worker_factory, tmp_path, w3, kms_server
):
    key_id = await kms_server.create_key()
    signer = await open_signer(
        project_with(vault=("aws_kms", kms_server.yaml(key_id))), "vault", kms_server.env
    )
    await signer.close()
    await pays_exactly_once(
        settings,
        worker_factory,
        tmp_path,
        w3,
        "aws_kms",
        kms_server.yaml(key_id),
        signer.address,
        kms_server.env,
    )


@pytest.mark.usefixtures("applied_topics", "schema")
async def test_a_kms_that_stops_answering_takes_no_nonce_and_a_retry_pays_once(
    settings, worker_factory, tmp_path, w3
):
    """A send whose KMS does not answer is refused ``signer_unavailable`` before anything
    is stored (no nonce taken); its step's retry, once KMS is back, pays once, with the
    nonce after the last one used."""
    folder, port = tmp_path / "kms", chain.free_port()
    process = start_local_kms(folder, port)
    try:
        server = LocalKms(f"http://127.0.0.1:{port}/", process)
        key_id = await server.create_key()
        probe = await open_signer(
            project_with(vault=("aws_kms", server.yaml(key_id))), "vault", server.env
        )
        await probe.close()
        address = probe.address
        await chain.rpc(w3, "anvil_setBalance", address, hex(10**18))
        path = tmp_path / "project.yaml"
        path.write_text(
            PAY.format(kind="aws_kms", signer=server.yaml(key_id), address=address).replace(
                "      - id: pay\n",
                "      - id: pay\n        retry: { max_attempts: 20, backoff: 1s }\n",
            )
        )
        worker = worker_factory(project_path=path, env=server.env)
        await worker.wait_ready()
        first = await fire(settings, path, "pay", "manual:before", {"to": Account.create().address})
        assert (await settled_run(settings, first, timeout=90))["status"] == "succeeded"
        [sent] = await sends_of(settings, first)

        stop(process)
        recipient = Account.create().address
        rid = await fire(settings, path, "pay", "manual:during", {"to": recipient})
        key = sent["send_key"].replace("manual:before", "manual:during")

        async def refused() -> dict | None:
            conn = await storage.connect(settings)
            async with conn:
                kept = await sends.refusals(conn, [(key, 1)])
            return kept.get((key, 1))

        error = await wait_until(refused, timeout=60, what="the send refused while KMS is down")
        assert error["kind"] == "signer_unavailable", error
        assert await sends_of(settings, rid) == []  # nothing stored, no nonce taken
        process = start_local_kms(folder, port)
        run = await settled_run(settings, rid, timeout=90)
        assert run["status"] == "succeeded", (run, worker.tail())
        assert await w3.eth.get_balance(recipient) == 12345
        assert await w3.eth.get_transaction_count(address) == 2
        assert [s["nonce"] for s in await sends_of(settings, rid)] == [1]
    finally:
        stop(process)


async def test_doctor_reports_the_address_each_signer_gives_and_fails_a_different_one(
    hsm, kms_server, w3
):
    from rflow.doctor import check_relayer

    address = hsm.make_key("doctored")
    key_id = await kms_server.create_key()
    url = {"local": [os.environ["RFLOW_RPC_URL_LOCAL"]]}
    env = {"HSM_PIN": PIN, **kms_server.env}
    project = project_with(address, vault=("pkcs11", hsm.yaml("doctored")))
    good = await check_relayer("vault", project.relayers["vault"], url, env)
    assert good.status in ("pass", "warn") and good.detail.startswith(f"{address} (pkcs11); ")
    project = project_with(address, cloud=("aws_kms", kms_server.yaml(key_id)))
    bad = await check_relayer("cloud", project.relayers["cloud"], url, env)
    assert bad.status == "fail"
    assert bad.detail.startswith(f"AWS KMS key {key_id} ({kms_server.spec(key_id).region}) signs")
    assert bad.detail.endswith(f"the project declares {address}")
    silent = await check_relayer(
        "vault", project_with(vault=("pkcs11", hsm.yaml("doctored"))).relayers["vault"], url, {}
    )
    assert silent.status == "fail" and "HSM_PIN" in silent.detail


async def test_a_token_that_keeps_no_public_key_still_gives_the_address(hsm):
    from pkcs11 import ObjectClass

    address = hsm.make_key("bare")
    session = pkcs11._open(hsm.spec("bare"), pkcs11.SecretStr(PIN), "vault", rw=True)
    try:
        session.get_key(object_class=ObjectClass.PUBLIC_KEY, label="bare").destroy()
    finally:
        session.close()
    key = await pkcs11.open_key("vault", hsm.spec("bare"), {"HSM_PIN": PIN})
    signer = Signer("vault", key)
    assert signer.address == address  # the one key two signatures both recover to
    await signed_transfer_recovers(signer)

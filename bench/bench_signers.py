"""Time per signed transaction through each relayer signer, beside signing inline.

    python bench/bench_signers.py [--count 2000] [--remote 300]

Baseline, measured in the same run and interleaved call by call with ``key_env``: the
relayer's signer as it was before signers were pluggable, a synchronous method that
builds the EIP-1559 envelope and signs it inline with coincurve. ``key_env`` goes through :class:`Signer` (a coroutine,
the key behind the :class:`Key` interface); its target is at most 1.10 of the baseline.
``pkcs11`` (SoftHSM, through python-pkcs11 in a worker thread) and ``aws_kms`` (local-kms
over HTTP on 127.0.0.1, SigV4-signed) are reported beside the same baseline: they pay a
device or a network, and the low-s normalization and recovery-id search.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rlp
from _report import emit, verdict
from coincurve import PrivateKey
from eth_utils import keccak

from rflow.relayer import kms, pkcs11
from rflow.relayer.signing import LocalKey, Signer
from tests.integration.signers import PIN, local_kms, softhsm

FIELDS = {
    "chain_id": 31337,
    "to": "0x" + "11" * 20,
    "value": 10**15,
    "data": bytes.fromhex("a9059cbb") + bytes(64),
    "gas": 60_000,
    "max_fee_per_gas": 2 * 10**9,
    "max_priority_fee_per_gas": 10**9,
}
SECRET = bytes.fromhex("42" * 32)


class SyncSigner:
    """The baseline: the relayer's signer before signers were pluggable, as it was (a
    synchronous method that builds the envelope and signs it inline with coincurve)."""

    def __init__(self, key: PrivateKey) -> None:
        self._key = key

    def sign(
        self,
        *,
        chain_id: int,
        nonce: int,
        to: str,
        value: int,
        data: bytes,
        gas: int,
        max_fee_per_gas: int,
        max_priority_fee_per_gas: int,
    ) -> tuple[bytes, str]:
        raw_to = bytes.fromhex(to.removeprefix("0x"))
        if len(raw_to) != 20:
            raise ValueError(f"not an address: {to!r}")
        fields = [
            chain_id,
            nonce,
            max_priority_fee_per_gas,
            max_fee_per_gas,
            gas,
            raw_to,
            value,
            data,
            [],
        ]
        digest = keccak(b"\x02" + rlp.encode(fields))
        sig = self._key.sign_recoverable(digest, hasher=None)
        r, s = sig[:32], sig[32:64]
        raw = b"\x02" + rlp.encode(
            [*fields, sig[64], int.from_bytes(r, "big"), int.from_bytes(s, "big")]
        )
        return raw, "0x" + keccak(raw).hex()


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


async def key_env(count: int) -> tuple[float, float]:
    """Median seconds per signature: the baseline and key_env, interleaved call by call
    so that a load change on the machine falls on both alike."""
    sync, signer = SyncSigner(PrivateKey(SECRET)), Signer("bench", LocalKey(SECRET))
    base, ours = [], []
    clock = time.perf_counter
    for nonce in range(count):
        start = clock()
        sync.sign(nonce=nonce, **FIELDS)
        base.append(clock() - start)
        start = clock()
        await signer.sign(nonce=nonce, **FIELDS)
        ours.append(clock() - start)
    return median(base), median(ours)


async def remote(signer: Signer, count: int) -> float:
    times = []
    for nonce in range(count):
        start = time.perf_counter()
        await signer.sign(nonce=nonce, **FIELDS)
        times.append(time.perf_counter() - start)
    return median(times)


async def main(count: int, count_remote: int) -> None:
    base, ours = await key_env(count)
    rows = [
        (
            "key_env: one signed transaction (median)",
            f"{ours * 1e3:.3f} ms",
            f"{base * 1e3:.3f} ms (synchronous, inline)",
            f"{ours / base:.2f}",
            "<= 1.10 of baseline",
            verdict(ours / base <= 1.10),
        )
    ]
    with tempfile.TemporaryDirectory() as folder:
        with softhsm(Path(folder) / "softhsm") as hsm:
            hsm.make_key("bench")
            key = await pkcs11.open_key("bench", hsm.spec("bench"), {"HSM_PIN": PIN})
            took = await remote(Signer("bench", key), count_remote)
            rows.append(
                (
                    "pkcs11 (SoftHSM): one signed transaction (median)",
                    f"{took * 1e3:.3f} ms",
                    f"{base * 1e3:.3f} ms (synchronous, inline)",
                    f"{took / base:.1f}",
                    "-",
                    "-",
                )
            )
        with local_kms(Path(folder) / "kms") as server:
            key_id = await server.create_key()
            key = await kms.open_key("bench", server.spec(key_id), server.env)
            try:
                took = await remote(Signer("bench", key), count_remote)
            finally:
                await key.close()
            rows.append(
                (
                    "aws_kms (local-kms on 127.0.0.1): one signed transaction (median)",
                    f"{took * 1e3:.3f} ms",
                    f"{base * 1e3:.3f} ms (synchronous, inline)",
                    f"{took / base:.1f}",
                    "-",
                    "-",
                )
            )
    emit("signers", rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5000, help="key_env signatures")
    parser.add_argument("--remote", type=int, default=300, help="HSM and KMS signatures")
    args = parser.parse_args()
    asyncio.run(main(args.count, args.remote))

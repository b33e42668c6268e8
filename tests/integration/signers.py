"""The HSM and the KMS the signer tests sign with: SoftHSM (Debian's softhsm2) with tokens
of the test run's own, and local-kms (built by ``scripts/stack install``) on 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from rflow.lang.model import AwsKmsKey, Pkcs11Key
from rflow.relayer import kms, pkcs11
from tests.integration.harness import free_port

SOFTHSM = "/usr/lib/softhsm/libsofthsm2.so"
ROOT = Path(__file__).resolve().parents[2]
LOCAL_KMS = ROOT / ".stack" / "local-kms" / "bin" / "local-kms"
PIN = "246810"
REGION = "eu-west-1"
INSTALL = "scripts/stack install puts it there"


@dataclass(frozen=True)
class Hsm:
    """A SoftHSM token directory of the test run's own, with tokens initialised in it."""

    conf: Path
    pin: str = PIN

    def spec(self, label: str, token: str = "rflow") -> Pkcs11Key:
        return Pkcs11Key(module=SOFTHSM, token=token, key_label=label, pin_env="HSM_PIN")

    def make_key(self, label: str, *, token: str = "rflow", secret: bytes | None = None) -> str:
        """A secp256k1 key labelled ``label`` made in (or imported into) ``token``; its
        address."""
        return pkcs11.generate(self.spec(label, token), self.pin, secret=secret)

    def yaml(self, label: str, token: str = "rflow") -> str:
        return f"{{ module: {SOFTHSM}, token: {token}, key_label: {label}, pin_env: HSM_PIN }}"


@contextlib.contextmanager
def softhsm(folder: Path, tokens: tuple[str, ...] = ("rflow", "spare")) -> Iterator[Hsm]:
    """Tokens ``tokens`` (user PIN :data:`PIN`) in ``folder``; ``SOFTHSM2_CONF`` points at
    them for this process and the workers it starts, until the block ends. SoftHSM reads
    its configuration once per process, when the library is first loaded."""
    assert os.path.isfile(SOFTHSM), f"softhsm2 is not installed: {INSTALL}"
    util = shutil.which("softhsm2-util")
    assert util, f"softhsm2-util is not installed: {INSTALL}"
    (folder / "tokens").mkdir(parents=True)
    conf = folder / "softhsm2.conf"
    conf.write_text(
        f"directories.tokendir = {folder / 'tokens'}\nobjectstore.backend = file\n"
        "log.level = ERROR\nslots.removable = false\n"
    )
    env = {**os.environ, "SOFTHSM2_CONF": str(conf)}
    for token in tokens:
        subprocess.run(
            [util, "--init-token", "--free", "--label", token, "--pin", PIN, "--so-pin", "13579"],
            env=env,
            check=True,
            capture_output=True,
            timeout=30,
        )
    before = os.environ.get("SOFTHSM2_CONF")
    os.environ["SOFTHSM2_CONF"] = str(conf)
    try:
        yield Hsm(conf)
    finally:
        if before is None:
            os.environ.pop("SOFTHSM2_CONF", None)
        else:
            os.environ["SOFTHSM2_CONF"] = before


@dataclass(frozen=True)
class LocalKms:
    """local-kms on 127.0.0.1: its URL, and the environment a relayer signs with it in."""

    url: str
    process: subprocess.Popen[bytes]

    @property
    def env(self) -> dict[str, str]:
        return {
            "KMS_URL": self.url,
            "AWS_ACCESS_KEY_ID": "AKIDLOCALKMS",
            "AWS_SECRET_ACCESS_KEY": "local-kms-secret-key",
        }

    def spec(self, key_id: str) -> AwsKmsKey:
        return AwsKmsKey(key_id=key_id, region=REGION, endpoint_env="KMS_URL")

    def yaml(self, key_id: str) -> str:
        return f"{{ key_id: {key_id}, region: {REGION}, endpoint_env: KMS_URL }}"

    async def create_key(self, spec: str = "ECC_SECG_P256K1", alias: str | None = None) -> str:
        """A new key of ``spec`` for SIGN_VERIFY (its id; ``alias/NAME`` when ``alias``)."""
        client = kms.KmsKey(
            "tests",
            self.spec("none"),
            self.url,
            kms.Credentials("AKIDLOCALKMS", SecretStr("local-kms-secret-key")),
        )
        try:
            made = await client.call("CreateKey", {"KeyUsage": "SIGN_VERIFY", "KeySpec": spec})
            key_id = made["KeyMetadata"]["KeyId"]
            if alias is None:
                return key_id
            await client.call("CreateAlias", {"AliasName": f"alias/{alias}", "TargetKeyId": key_id})
            return f"alias/{alias}"
        finally:
            await client.close()


def start_local_kms(folder: Path, port: int) -> subprocess.Popen[bytes]:
    """local-kms on 127.0.0.1:``port``, its keys kept in ``folder`` (a restart on the same
    folder has them again), once it listens."""
    assert LOCAL_KMS.is_file(), f"local-kms is not built: {INSTALL}"
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "local-kms.log").open("ab") as log:
        process = subprocess.Popen(
            [str(LOCAL_KMS)],
            env={
                "PATH": os.environ.get("PATH", ""),
                "PORT": str(port),
                "KMS_DATA_PATH": str(folder / "data"),
                "KMS_SEED_PATH": str(folder / "none.yaml"),
                "KMS_REGION": REGION,
            },
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return process
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            raise AssertionError(
                "local-kms did not listen within 30 s: " + (folder / "local-kms.log").read_text()
            )
        time.sleep(0.05)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a process this test started, by its pid."""
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@contextlib.contextmanager
def local_kms(folder: Path) -> Iterator[LocalKms]:
    """local-kms on a free port of 127.0.0.1, its data in ``folder``; stopped (by its pid)
    when the block ends."""
    port = free_port()
    process = start_local_kms(folder, port)
    try:
        yield LocalKms(f"http://127.0.0.1:{port}/", process)
    finally:
        stop(process)

"""``rflow keys``: make a relayer's key inside an HSM, and ask a relayer's signer its address."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from rflow.cli import main
from rflow.cli.common import fail
from rflow.settings import environ


@main.group()
def keys() -> None:
    """Relayer keys: make one inside a PKCS#11 token, ask a signer its address."""


@keys.command("generate")
@click.option("--module", required=True, help="The token's PKCS#11 library (absolute path).")
@click.option("--token", required=True, help="The label of the token.")
@click.option("--label", required=True, help="The label of the new key (the relayer's key_label).")
@click.option(
    "--pin-env",
    required=True,
    metavar="VAR",
    help="Environment variable holding the token's user PIN.",
)
@click.option(
    "--import-from",
    "import_env",
    metavar="VAR",
    help="Store the private key held (hex) in this environment variable instead of making "
    "one (to move a development key into the token).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the address as JSON.")
def generate(
    module: str, token: str, label: str, pin_env: str, import_env: str | None, as_json: bool
) -> None:
    """Make a secp256k1 key labelled LABEL inside a PKCS#11 token and print its address.

    The token makes the key (or stores the one imported) as sensitive and never
    extractable: it signs with it and gives it to no one. Declare it on a relayer as
    ``pkcs11: {module, token, key_label, pin_env}``, fund the address, and, optionally,
    declare ``address`` so `rflow validate` checks the key is the one meant.
    """
    from pydantic import ValidationError

    from rflow.failures import RflowError
    from rflow.lang.model import Pkcs11Key
    from rflow.relayer import pkcs11

    env = environ()
    try:
        spec = Pkcs11Key(module=module, token=token, key_label=label, pin_env=pin_env)
    except ValidationError as exc:
        fail("; ".join(str(e["msg"]) for e in exc.errors()), 2)
    pin = env.get(pin_env)
    if not pin:
        fail(f"environment variable {pin_env} (the token's PIN) is not set", 2)
    secret: bytes | None = None
    if import_env is not None:
        text = env.get(import_env)
        if not text:
            fail(f"environment variable {import_env} (the key to import) is not set", 2)
        try:
            secret = bytes.fromhex(text.strip().removeprefix("0x"))
        except ValueError:
            fail(f"{import_env} does not hold a private key in hex", 2)
    try:
        address = pkcs11.generate(spec, pin, secret=secret)
    except RflowError as exc:
        fail(exc.message.removeprefix(f"relayer {label}: "))
    if as_json:
        click.echo(json.dumps({"address": address, "token": token, "key_label": label}))
    else:
        click.echo(address)


@keys.command("address")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.argument("relayer")
def address(path: Path, relayer: str) -> None:
    """Ask RELAYER's signer, as the project at PATH declares it, which address it signs
    for (its key, its HSM or its KMS) and print it."""
    from rflow.failures import RflowError
    from rflow.lang import ConfigError, load_project
    from rflow.relayer.signing import ask_address

    env = environ()
    try:
        project = load_project(path, env)
    except ConfigError as exc:
        fail(f"{path} has {len(exc.diagnostics)} problems; run rflow validate {path}", 2)
    declared = project.relayers.get(relayer)
    if declared is None:
        fail(f"no relayer named {relayer!r} in {path}", 2)
    try:
        click.echo(asyncio.run(ask_address(relayer, declared, env)))
    except RflowError as exc:
        fail(exc.message)

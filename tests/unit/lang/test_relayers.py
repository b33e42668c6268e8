"""A relayer declares where its key is: key_env, pkcs11 or aws_kms, exactly one; every
mistake is located."""

from __future__ import annotations

from rflow.lang import validate_text

HEAD = "networks:\n  local: { chain_id: 31337 }\nrelayers:\n"
HSM = (
    "{ module: /usr/lib/softhsm/libsofthsm2.so, token: rflow, key_label: payout, pin_env: HSM_PIN }"
)
KMS = "{ key_id: alias/payout, region: eu-west-1, endpoint_env: KMS_URL }"


def found(relayers: str, env: dict[str, str] | None = None) -> list[str]:
    report = validate_text(HEAD + relayers, env or {}, "p.yaml")
    return [str(d) for d in report.diagnostics]


def test_each_kind_of_signer_is_declared_as_such():
    env = {
        "DEV_KEY": "x",
        "HSM_PIN": "1",
        "AWS_ACCESS_KEY_ID": "a",
        "AWS_SECRET_ACCESS_KEY": "b",
        "KMS_URL": "http://127.0.0.1:1/",
    }
    report = validate_text(
        HEAD
        + "  dev: { key_env: DEV_KEY, networks: [local] }\n"
        + f"  vault: {{ pkcs11: {HSM}, networks: [local] }}\n"
        + f"  cloud: {{ aws_kms: {KMS}, networks: [local] }}\n",
        env,
    )
    assert report.project is not None
    kinds = {name: r.kind for name, r in report.project.relayers.items()}
    assert kinds == {"dev": "key_env", "vault": "pkcs11", "cloud": "aws_kms"}
    cloud = report.project.relayers["cloud"].aws_kms
    assert cloud is not None and cloud.secret_access_key_env == "AWS_SECRET_ACCESS_KEY"


def test_a_relayer_declares_exactly_one_signer():
    assert found("  a: { networks: [local] }\n") == [
        "p.yaml:4:6: error: relayers.a: a relayer declares exactly one of key_env, pkcs11 or "
        "aws_kms"
    ]
    assert found(f"  a: {{ key_env: K, pkcs11: {HSM}, networks: [local] }}\n")[0] == (
        "p.yaml:4:6: error: relayers.a: a relayer declares exactly one of key_env, pkcs11 or "
        "aws_kms (got key_env and pkcs11)"
    )


def test_mistakes_inside_a_signer_are_located():
    assert found(
        "  a: { pkcs11: { module: libsofthsm2.so, token: t, key_label: k, pin_env: P }, networks: [local] }\n"
    )[0] == (
        "p.yaml:4:26: error: relayers.a.pkcs11.module: the PKCS#11 module must be an absolute "
        "path to a shared library, not 'libsofthsm2.so'"
    )
    assert found("  a: { aws_kms: { key_id: k, region: mars }, networks: [local] }\n") == [
        "p.yaml:4:38: error: relayers.a.aws_kms.region: 'mars' is not an AWS region name (like "
        "us-east-1 or eu-west-2)"
    ]
    [missing] = found(
        "  a: { pkcs11: { module: /m.so, token: t, pin_env: P }, networks: [local] }\n"
    )
    assert "relayers.a.pkcs11: missing required field 'key_label'" in missing
    [unknown] = found(
        "  a: { aws_kms: { key_id: k, region: us-east-1, endpoint: x }, networks: [local] }\n"
    )
    assert "relayers.a.aws_kms: unknown field 'endpoint'" in unknown
    assert "did you mean 'endpoint_env'" in unknown


def test_what_a_signer_needs_and_this_machine_lacks_is_a_warning():
    lines = found(
        f"  vault: {{ pkcs11: {HSM.replace('/usr/lib/softhsm/libsofthsm2.so', '/nowhere/lib.so')}, networks: [local] }}\n"
        f"  cloud: {{ aws_kms: {KMS}, networks: [local] }}\n"
    )
    assert [line.split(": warning: ")[1].split(":")[0] for line in lines] == [
        "relayers.vault.pkcs11.module",
        "relayers.vault.pkcs11.pin_env",
        "relayers.cloud.aws_kms.access_key_id_env",
        "relayers.cloud.aws_kms.secret_access_key_env",
        "relayers.cloud.aws_kms.endpoint_env",
    ]
    assert "no PKCS#11 library at /nowhere/lib.so" in lines[0]

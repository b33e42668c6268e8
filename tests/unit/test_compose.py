"""docker-compose.kafka.yml is for users with Docker: check what it must hold."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import yaml

from rflow.settings import Settings
from tests.conftest import REPO

COMPOSE = yaml.safe_load((REPO / "docker-compose.kafka.yml").read_text())
SERVICES = COMPOSE["services"]


def published(service: str) -> dict[int, str]:
    """container port -> host address:port, for every published port."""
    ports = {}
    for entry in SERVICES[service].get("ports", []):
        host_ip, host_port, container = entry.split(":")
        ports[int(container)] = f"{host_ip}:{host_port}"
    return ports


def test_it_has_every_service_with_a_health_check():
    assert set(SERVICES) == {
        "kafka",
        "kafka-secure",
        "kafka-1",
        "kafka-2",
        "kafka-3",
        "postgres",
        "anvil",
        "prometheus",
        "grafana",
    }
    for name, service in SERVICES.items():
        assert "healthcheck" in service, name
        assert service["healthcheck"]["test"], name


def test_ports_are_loopback_only_and_match_the_settings_defaults():
    defaults = Settings.from_env({})
    for service in SERVICES.values():
        for entry in service.get("ports", []):
            assert entry.startswith("127.0.0.1:"), entry
    assert published("kafka")[9092] == defaults.kafka_brokers
    pg = defaults.database_url.get_secret_value()
    assert pg == "postgresql://rflow@127.0.0.1:55432/rflow"
    assert published("postgres")[5432] == "127.0.0.1:55432"
    assert published("anvil")[8545] == defaults.rpc_urls["local"].removeprefix("http://")
    # The workers listen on the host's 127.0.0.1: Prometheus (and Grafana beside it) share
    # the host's network, on loopback addresses.
    for name in ("prometheus", "grafana"):
        assert SERVICES[name]["network_mode"] == "host", name
    assert "--web.listen-address=127.0.0.1:9090" in SERVICES["prometheus"]["command"]
    assert SERVICES["grafana"]["environment"]["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"


def test_kafka_is_a_single_node_kraft_broker_without_topic_auto_creation():
    env = SERVICES["kafka"]["environment"]
    assert SERVICES["kafka"]["image"].startswith("apache/kafka:4.")
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@localhost:9093"
    assert "PLAINTEXT://127.0.0.1:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert env["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"] == "0"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    # The data is where the volume is mounted, not the image's /tmp default.
    [volume] = SERVICES["kafka"]["volumes"]
    assert volume.split(":")[1] == env["KAFKA_LOG_DIRS"]


CLUSTER = ("kafka-1", "kafka-2", "kafka-3")


def test_the_cluster_is_three_kraft_nodes_that_each_hold_a_copy_and_acknowledge_with_two():
    """The profile `cluster` (docs/cluster.md): what `scripts/stack up --brokers 3` runs."""
    ids, cluster_ids, voters = set(), set(), set()
    for name in CLUSTER:
        node = SERVICES[name]
        env = node["environment"]
        assert node["profiles"] == ["cluster"], name  # `docker compose up` alone: one broker
        assert node["image"] == SERVICES["kafka"]["image"]
        assert node["hostname"] == name
        ids.add(env["KAFKA_NODE_ID"])
        cluster_ids.add(env["CLUSTER_ID"])
        voters.add(env["KAFKA_CONTROLLER_QUORUM_VOTERS"])
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        # Clients on the host reach each node where it is published, and only there.
        [(container, host)] = published(name).items()
        listeners = dict(item.split("://") for item in env["KAFKA_LISTENERS"].split(","))
        advertised = dict(
            item.split("://") for item in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
        )
        assert listeners["EXTERNAL"] == f":{container}"
        assert advertised["EXTERNAL"] == host
        # The nodes reach each other by service name on the compose network.
        assert advertised["INTERNAL"] == f"{name}:{listeners['INTERNAL'].lstrip(':')}"
        assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == "INTERNAL"
        assert "CONTROLLER" not in advertised
        protocols = dict(
            item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
        )
        assert set(protocols) == set(listeners)
        assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] == "CONTROLLER"
        # Three copies of everything, two needed in sync, no unclean election.
        for key in (
            "KAFKA_DEFAULT_REPLICATION_FACTOR",
            "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
            "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
            "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR",
        ):
            assert env[key] == "3", (name, key)
        for key in (
            "KAFKA_MIN_INSYNC_REPLICAS",
            "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
            "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR",
        ):
            assert env[key] == "2", (name, key)
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"
        assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
        [volume] = node["volumes"]
        source, target = volume.split(":")
        assert target == env["KAFKA_LOG_DIRS"] and source in COMPOSE["volumes"], name
        assert node["healthcheck"]["test"][1].endswith(
            f"--bootstrap-server 127.0.0.1:{listeners['INTERNAL'].lstrip(':')} >/dev/null 2>&1"
        )
    assert ids == {"1", "2", "3"}
    [voters_line] = voters
    assert voters_line == "1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093"
    assert all(env_of(n)["KAFKA_LISTENERS"].endswith("CONTROLLER://:9093") for n in CLUSTER)
    # One cluster id, a valid one: a base64 (URL-safe) UUID of 16 bytes.
    [cluster_id] = cluster_ids
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16
    assert len({v.split(":")[0] for n in CLUSTER for v in SERVICES[n]["volumes"]}) == 3


def env_of(name: str) -> dict[str, str]:
    return SERVICES[name]["environment"]


def test_postgres_creates_the_rflow_database_and_user():
    env = SERVICES["postgres"]["environment"]
    assert env["POSTGRES_USER"] == "rflow"
    assert env["POSTGRES_DB"] == "rflow"


def test_mounted_config_files_exist():
    for service in SERVICES.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./.stack/"):
                # Made on the machine at run time (the workers' targets, the scrape token,
                # scripts/stack compose-secure's files), never committed.
                continue
            if source.startswith("./"):
                assert (REPO / source).exists(), source


def test_prometheus_finds_the_workers_and_the_token_where_the_stack_puts_them():
    """The shipped prometheus.yml needs no edit: paths relative to it reach .stack/, where
    workers leave their targets (scripts/stack env) and scripts/demo the token, and the
    compose file mounts .stack/prometheus where those relative paths lead."""
    prometheus = yaml.safe_load((REPO / "scripts/compose/prometheus.yml").read_text())
    [job] = prometheus["scrape_configs"]
    assert job["authorization"] == {
        "type": "Bearer",
        "credentials_file": "../../.stack/prometheus/scrape-token",
    }
    assert job["file_sd_configs"][0]["files"] == ["../../.stack/prometheus/targets/*.json"]
    assert "credentials" not in job["authorization"] and "static_configs" not in job
    mounted = dict(v.split(":")[:2] for v in SERVICES["prometheus"]["volumes"])
    config = mounted["./scripts/compose/prometheus.yml"]
    assert mounted["./.stack/prometheus"] == str(
        (Path(config).parent / "../../.stack/prometheus").resolve()
    )
    env = subprocess.run(
        [str(REPO / "scripts" / "stack"), "env"], capture_output=True, text=True, check=True
    ).stdout
    assert f"export RFLOW_METRICS_TARGETS_DIR={REPO}/.stack/prometheus/targets" in env.splitlines()


def test_the_secured_kafka_is_a_variant_of_its_own_on_another_port():
    secure = SERVICES["kafka-secure"]
    assert secure["profiles"] == ["secure"]  # `docker compose up` alone starts the plain one
    assert secure["image"] == SERVICES["kafka"]["image"]
    assert published("kafka-secure") == {9094: "127.0.0.1:9094"}
    assert secure["entrypoint"] == ["/bin/bash", "/rflow/kafka-secure.sh"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in secure["volumes"]}
    assert mounts["/rflow/kafka-secure.sh"] == "./scripts/compose/kafka-secure.sh"
    assert mounts["/etc/kafka/secure"] == "./.stack/kafka/secure"
    assert "kafka-secure-data" in COMPOSE["volumes"]


def test_the_secured_kafka_runs_the_configuration_the_stack_renders(tmp_path):
    """scripts/stack compose-secure writes what the container reads: the broker's
    configuration (SASL_SSL on 9094 for every interface, advertised on 127.0.0.1, mutual
    TLS inside, the StandardAuthorizer denying what no ACL allows), the admin's client
    config and the ACL commands of `rflow kafka acls`, all at the paths of the mount."""
    env = {
        **os.environ,
        "RFLOW_STACK_DIR": str(tmp_path / "stack"),
        "RFLOW_STACK_KAFKA_LIBS": str(tmp_path / "unused-libs"),
    }
    subprocess.run(
        [str(REPO / "scripts" / "stack"), "compose-secure"],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    docker = tmp_path / "stack" / "kafka" / "secure" / "docker"
    config = dict(
        line.split("=", 1)
        for line in (docker / "server.properties").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert config["listeners"].startswith("SASL_SSL://0.0.0.0:9094,")
    assert config["advertised.listeners"].startswith("SASL_SSL://127.0.0.1:9094,")
    assert config["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,TLS:SSL,CONTROLLER:SSL"
    assert config["authorizer.class.name"].endswith("StandardAuthorizer")
    assert config["allow.everyone.if.no.acl.found"] == "false"
    assert config["ssl.keystore.location"] == "/etc/kafka/secure/broker-keystore.pem"
    assert config["ssl.truststore.location"] == "/etc/kafka/secure/ca.pem"
    assert config["log.dirs"] == "/var/lib/kafka/data"
    assert config["auto.create.topics.enable"] == "false"
    admin = (docker / "admin.properties").read_text()
    assert "ssl.truststore.location=/etc/kafka/secure/ca.pem" in admin
    acls = [line for line in (docker / "acls").read_text().splitlines() if line[:1] != "#"]
    assert acls and all(
        line.startswith(
            "kafka-acls --bootstrap-server 127.0.0.1:9094 "
            "--command-config /etc/kafka/secure/docker/admin.properties --add "
        )
        for line in acls
    )
    assert any("--allow-principal User:producer" in line for line in acls)
    secure = tmp_path / "stack" / "kafka" / "secure"
    for name in ("ca.pem", "broker-keystore.pem", "admin.password", "rflow.password"):
        assert (secure / name).stat().st_mode & 0o077 == 0, name  # this user's alone
    # The container's script reads these, under the mount point /etc/kafka/secure.
    script = (REPO / "scripts" / "compose" / "kafka-secure.sh").read_text()
    assert "SECURE=/etc/kafka/secure" in script
    for used in ("docker/server.properties", "docker/admin.properties", "docker/acls"):
        assert f"$SECURE/{used}" in script and (secure / used).is_file(), used
    assert "for who in admin rflow producer" in script
    for who in ("admin", "rflow", "producer"):
        assert (secure / f"{who}.password").is_file()

"""Settings: the one reader of environment variables."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from rflow.settings import Settings, SettingsError


def test_defaults_match_the_local_stack():
    settings = Settings.from_env({})
    assert settings.kafka_brokers == "127.0.0.1:9092"
    assert settings.database_url.get_secret_value() == "postgresql://rflow@127.0.0.1:55432/rflow"
    assert settings.rpc_url("local") == "http://127.0.0.1:8545"
    assert settings.database_schema == "rflow"


def test_variables_override_defaults():
    settings = Settings.from_env(
        {
            "RFLOW_KAFKA_BROKERS": "k1:9092,k2:9092",
            "RFLOW_DATABASE_URL": "postgresql://u:secret@db:5432/x",
            "RFLOW_RPC_URL_BASE": "http://base:8545",
            "RFLOW_WEB_PORT": "7000",
            "RFLOW_TOPICS_FILE": "/etc/rflow/topics.yaml",
        }
    )
    assert settings.kafka_brokers == "k1:9092,k2:9092"
    assert settings.rpc_url("base") == settings.rpc_url("BASE") == "http://base:8545"
    assert settings.web_port == 7000
    assert settings.topics_file == Path("/etc/rflow/topics.yaml")


def test_the_password_never_shows():
    # A password unlike any path the repository may be checked out at.
    settings = Settings.from_env({"RFLOW_DATABASE_URL": "postgresql://u:pw-7f3a91@db:5432/x"})
    assert "pw-7f3a91" not in repr(settings)
    assert "pw-7f3a91" not in str(settings.model_dump())
    assert settings.database_display == "postgresql://db:5432/…"


def test_an_rpc_url_never_shows():
    settings = Settings.from_env({"RFLOW_RPC_URL_MAINNET": "https://u:pw@rpc.test/v3/k3y-7f3a91"})
    assert "k3y-7f3a91" not in repr(settings)


def test_missing_network_names_the_variable():
    with pytest.raises(LookupError, match="set RFLOW_RPC_URL_ARBITRUM"):
        Settings.from_env({}).rpc_url("arbitrum")


def test_bad_values_are_refused():
    with pytest.raises(SettingsError, match="RFLOW_WEB_PORT \\(web_port\\)"):
        Settings.from_env({"RFLOW_WEB_PORT": "eighty"})


def test_to_env_round_trips():
    settings = Settings.from_env({"RFLOW_RPC_URL_BASE": "http://b"}, app_id="a", topic_prefix="p.")
    assert Settings.from_env(settings.to_env()) == settings


def test_settings_are_frozen():
    with pytest.raises(ValidationError):
        Settings.from_env({}).app_id = "x"  # type: ignore[misc]


def test_an_empty_variable_counts_as_unset():
    settings = Settings.from_env({"RFLOW_PROJECT": "", "RFLOW_API_TOKEN": "", "RFLOW_APP_ID": ""})
    assert (settings.project_path, settings.api_token, settings.app_id) == (None, None, "rflow")

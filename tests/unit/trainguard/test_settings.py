"""Configuration: YAML file, TRAINGUARD_* overrides, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.settings import ConfigError, load_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about defaults and files: no TRAINGUARD_* from outside."""
    import os

    for name in list(os.environ):
        if name.startswith("TRAINGUARD_"):
            monkeypatch.delenv(name)


def test_defaults_point_at_the_local_broker() -> None:
    settings = load_settings()
    assert settings.broker.servers == "127.0.0.1:9092"
    assert settings.topics.prefix == "tg."


def test_yaml_file_is_read(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("broker:\n  port: 19092\ntopics:\n  prefix: prod.\n")
    settings = load_settings(cfg)
    assert settings.broker.servers == "127.0.0.1:19092"
    assert settings.topics.prefix == "prod."


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("broker:\n  port: 19092\n")
    monkeypatch.setenv("TRAINGUARD_BROKER__PORT", "29092")
    assert load_settings(cfg).broker.port == 29092


def test_bad_value_is_one_line_naming_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("broker:\n  port: seventy\n")
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    message = str(err.value)
    assert "\n" not in message
    assert "broker.port" in message and "seventy" in message


def test_bad_env_value_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_TOPICS__PARTITIONS", "0")
    with pytest.raises(ConfigError, match="topics.partitions"):
        load_settings()


def test_unknown_key_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("brokr:\n  port: 1\n")
    with pytest.raises(ConfigError, match="brokr"):
        load_settings(cfg)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "absent.yaml")


def test_broken_yaml(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("broker: [unclosed\n")
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    assert "\n" not in str(err.value)

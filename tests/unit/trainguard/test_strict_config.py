"""Strict configuration: a typo or a wrong value anywhere in the tree fails at load, naming its path."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.schemas.kafka_config import BrokerSettings
from trainguard.settings import ConfigError, load_settings


def _load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return load_settings(path)


@pytest.mark.parametrize(("text", "message"), [
    ("broker: {bootstrapp: kafka-1:9092}", "broker.bootstrapp: Extra inputs are not permitted"),
    ("actions: {hmac_keyy: s3cret}", "actions.hmac_keyy: Extra inputs are not permitted"),
    ("actions: {kubernetes: {taint_keyy: x}}", "actions.kubernetes.taint_keyy"),
    ("collectors: {agent: {grace: 3}}", "collectors.agent.grace"),
    ("worker: {fastpath: false}", "worker.fastpath"),
    ("security: {act_key: /k}", "security.act_key"),
    ("detectors: {correlator: {window: 3}}", "detectors.correlator.window"),
    ("detectors: {instances: [{type: nan}, {type: hang}, {type: hang, name: h, params: {floor_s: abc}}]}",
     "detectors.instances[2].params.floor_s: Input should be a valid number"),
    ("detectors: {instances: [{type: hang, params: {flor_s: 3}}]}", "detectors.instances[0].params.flor_s"),
    ("detectors: {instances: [{type: nosuch}]}", "detectors.instances[0].type: no detector type 'nosuch'"),
    ("detectors: {instances: [{type: nan, parms: {}}]}", "detectors.instances[0].parms"),
    ("broker: {security_protocol: SASL_SSL}", "needs a sasl: section"),
    ("broker: {security_protocol: SASL_SSL, sasl: {mechanism: PLAIN, username: u, password: s3cret}}",
     "broker.sasl.password"),
    ("broker: {client_properties: {sasl_plain_password: s3cret}}", "secrets do not belong in client_properties"),
])
def test_bad_config_is_one_line_naming_the_path(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_detector_params_are_converted_to_their_declared_types(tmp_path: Path) -> None:
    settings = _load(tmp_path, "detectors: {instances: [{type: hang, params: {floor_s: '8'}}]}")
    assert settings.detectors.instances[0].params == {"floor_s": 8.0}  # type: ignore[attr-defined]


def test_a_secret_is_read_from_its_file_and_never_held_by_the_settings(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("hunter2\n")
    broker = BrokerSettings.model_validate({"security_protocol": "SASL_SSL", "sasl": {
        "mechanism": "SCRAM-SHA-512", "username": "u", "password": {"file": str(secret)}}})
    assert "hunter2" not in repr(broker) and "hunter2" not in broker.model_dump_json()
    from trainguard.schemas.kafka_config import client_options

    opts = client_options(broker, "kafka-python")
    assert opts["sasl_plain_password"] == "hunter2" and opts["security_protocol"] == "SASL_SSL"
    assert opts["ssl_context"].verify_mode.name == "CERT_REQUIRED"
    assert set(client_options(broker, "faust")) == {"broker_credentials"}
    assert client_options(BrokerSettings(), "aiokafka") == {}  # the local broker needs nothing


def test_the_agent_hands_the_hook_the_same_broker_without_secrets(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from trainguard.schemas.kafka_config import broker_environment, broker_from_environment

    broker = BrokerSettings.model_validate({
        "bootstrap": "kafka-1:9093", "security_protocol": "SASL_SSL", "tls": {"ca_file": "/ca.pem"},
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": "hook", "password": {"file": "/pw"}},
        "client_properties": {"request_timeout_ms": 40000}})
    env = broker_environment(broker)
    assert env["TRAINGUARD_BROKER__SASL__PASSWORD__FILE"] == "/pw"
    for key in [k for k in list(__import__("os").environ) if k.startswith("TRAINGUARD_BROKER")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    again = broker_from_environment()
    assert again.sasl == broker.sasl and again.tls == broker.tls and again.servers == "kafka-1:9093"
    assert again.client_properties == {"request_timeout_ms": 40000}

"""The worker's Kafka clients get the configured security: Faust's credentials and the fast path's options."""

from __future__ import annotations

from pathlib import Path

import faust

from trainguard.settings import load_settings
from trainguard.streams import kafka_io
from trainguard.streams.worker.factory import create_worker_app


def test_worker_speaks_the_configured_protocol(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TG_TEST_PW", "pw-from-env")
    settings = load_settings(
        broker={"bootstrap": "kafka-1:9093", "security_protocol": "SASL_SSL",
                "sasl": {"mechanism": "SCRAM-SHA-512", "username": "trainguard-worker",
                         "password": {"env": "TG_TEST_PW"}}},
        worker={"state_dir": str(tmp_path / "w")}, metrics={"enabled": False})
    app = create_worker_app(settings)
    credentials = app.conf.broker_credentials
    assert isinstance(credentials, faust.SASLCredentials)
    assert (credentials.username, credentials.password, credentials.mechanism.value) == (
        "trainguard-worker", "pw-from-env", "SCRAM-SHA-512")
    assert credentials.ssl_context is not None  # SASL over TLS, server verified
    loop = app.trainguard_batch_loop  # type: ignore[attr-defined]
    options = kafka_io.client_options(loop.broker, "aiokafka")  # what the loop's consumer and producer get
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_plain_username"] == "trainguard-worker"

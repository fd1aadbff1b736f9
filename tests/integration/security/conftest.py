"""One secured broker for the security tests of this directory (see secure_broker.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from secure_broker import Authority, SecureBroker, start

from trainguard.lab.localkafka.broker import LocalBroker
from trainguard.settings import load_settings


@pytest.fixture(scope="session")
def authority() -> Authority:
    return Authority()


@pytest.fixture(scope="session")
def secure_broker(tmp_path_factory: pytest.TempPathFactory, authority: Authority) -> Iterator[SecureBroker]:
    lib = LocalBroker(load_settings().broker).paths.lib_dir  # the jars `trainguard broker start` fetched
    LocalBroker(load_settings().broker).ensure_jars()
    broker = start(tmp_path_factory.mktemp("secure-broker"), authority, lib)
    try:
        yield broker
    finally:
        broker.broker.stop()


@pytest.fixture
def root(secure_broker: SecureBroker) -> Path:
    return secure_broker.root

"""The console's lemon-node view and its Release control, over the real broker."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from kafka import KafkaProducer

from tests.integration.streams.console.console_kit import OP, VIEW, console_key, read_raw, with_console
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import AuditEntry, OperatorCommand
from trainguard.schemas.signing import KeyRing
from trainguard.schemas.topics import Topics

pytestmark = pytest.mark.broker
LEMON = {"quarantined": {"ts": 300.0, "reason": "3 hw_fault incidents in 7 days (jobs j1, j2, j3; threshold 3)"},
         "incidents": [{"id": f"hw-j{i}", "kind": "hw_fault", "job": f"j{i}", "attempt": i, "ts": 100.0 * i}
                       for i in (1, 2, 3)],
         "selfchecks": [{"source": "d7-1-x", "ts": 150.0}], "released": [], "since": 0.0}


def test_quarantined_nodes_show_their_history_and_only_an_operator_releases_one(
        kafka: str, topic_prefix: str) -> None:
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    shown = AuditEntry(ts=time.time(), event="rails_state", subject_id="rails", actor="trainguard-act",
                       detail={"breaker": {"tripped": False, "reason": ""}, "pool": {"spares": [], "swaps": {}},
                               "approval_kinds": [], "evicted": {"j3": ["bad-1"]}, "lemons": {"bad-1": LEMON}})
    signer = console_key()

    async def body(c: TestClient[Any, Any]) -> None:
        producer.send(Topics(topic_prefix).name("audit"), key=b"rails", value=Codec().encode(shown))
        producer.flush()
        lemons: list[dict[str, Any]] = []
        async with asyncio.timeout(15):
            while not lemons:
                lemons = (await (await c.get("/api/controls", headers=VIEW)).json())["lemons"]
                await asyncio.sleep(0.1)
        (row,) = lemons
        assert row["node"] == "bad-1" and "3 hw_fault incidents" in row["reason"]
        assert [h["id"] for h in row["history"]] == ["hw-j3", "hw-j2", "d7-1-x", "hw-j1"]  # newest first
        assert row["history"][0]["job"] == "j3" and row["history"][2]["what"] == "failed self-check"
        assert (await c.post("/api/lemons/bad-1/release", headers=VIEW, json={})).status == 403  # a viewer
        assert (await c.post("/api/lemons/good-1/release", headers=OP, json={})).status == 409  # no lemon
        ok = await c.post("/api/lemons/bad-1/release", headers=OP, json={"reason": "board swapped"})
        assert ok.status == 202

    with_console(kafka, topic_prefix, body, signer=signer)
    producer.close()
    (raw,) = read_raw(kafka, topic_prefix + "operator", 1)
    command = Codec().decode(raw.value)
    assert isinstance(command, OperatorCommand)
    assert (command.verb, command.subject_id, command.operator, command.reason) == (
        "release_node", "bad-1", "alice", "board swapped")
    ring = KeyRing({"console": signer.private_key.public_key()})
    assert ring.check(raw.value, raw.headers)[1] == ""  # signed by the console, as act requires

"""The worker's logic without Kafka: decode, route, dead-letter, detect.

Every message goes in the way the worker's consume loop hands it over: one
fetch (`process_fetch`) under the guarded event clock, released by its
watermark, so what is tested is the production path.
"""

from __future__ import annotations

import base64

from trainguard.detectors.nan import NanDetector
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas import Codec, DeadLetter, Heartbeat, Incident, NodeGpuSample, TrainingStep
from trainguard.schemas.topics import Topics
from trainguard.streams.worker.processor import MessageProcessor, OutMessage, RawMessage
from trainguard.streams.worker.watermark import EventClock


def processor() -> MessageProcessor:
    return MessageProcessor(DetectionPipeline([NanDetector()]), Topics("t."))


def clock() -> EventClock[object]:
    return EventClock(max_ahead_s=30.0, idle_after_s=5.0, confirm_within=5, clock=lambda: 0.0)


def fetch(proc: MessageProcessor, *messages: RawMessage, events: EventClock[object] | None = None) -> list[OutMessage]:
    """One fetch of one partition, as the consume loop passes it."""
    return proc.process_fetch({(messages[0].topic, messages[0].partition): list(messages)}, events or clock())


def test_malformed_message_becomes_a_dead_letter_with_reason_and_bytes() -> None:
    proc = processor()
    out = fetch(proc, RawMessage(topic="t.training", value=b'{"type":"step"', key=b"j", partition=1, offset=42))
    assert [m.topic for m in out] == ["t.dead-letter"]
    letter = Codec().decode(out[0].value)
    assert isinstance(letter, DeadLetter)
    assert "malformed JSON" in letter.reason
    assert base64.b64decode(letter.original_b64) == b'{"type":"step"'
    assert (letter.partition, letter.offset, letter.source_topic) == (1, 42, "t.training")
    assert proc.stats.dead_lettered == 1


def test_record_on_the_wrong_topic_is_dead_lettered() -> None:
    value = Codec().encode(Heartbeat(ts=1.0, job="j", rank=0, node="n"))
    out = fetch(processor(), RawMessage(topic="t.gpu", value=value))
    assert "does not belong" in Codec().decode(out[0].value).reason


def test_tombstone_is_dead_lettered() -> None:
    out = fetch(processor(), RawMessage(topic="t.training", value=None))
    assert out[0].topic == "t.dead-letter"


def test_nan_step_yields_anomaly_and_incident() -> None:
    codec = Codec()
    proc = processor()
    good = codec.encode(TrainingStep(ts=1.0, job="j", rank=0, node="n0", step=1, loss=3.0))
    bad = codec.encode(TrainingStep(ts=2.0, job="j", rank=2, node="n1", step=2, loss="nan"))
    later = codec.encode(TrainingStep(ts=8.0, job="j", rank=0, node="n0", step=3, loss=3.0))
    events = clock()
    first = fetch(proc, RawMessage(topic="t.training", value=good), events=events)
    assert [(m.topic, m.key, m.value) for m in first] == [("t.node-jobs", b"n0", b"j")]  # which job n0 runs, once
    # the NaN detector reports once event time has moved past its settle time (1 s batching + 2 x 2 s skew)
    out = fetch(proc, RawMessage(topic="t.training", value=bad), RawMessage(topic="t.training", value=later),
                events=events)
    assert [m.topic for m in out] == ["t.anomalies", "t.incidents", "t.node-jobs"]  # n1's job, first seen
    incident = codec.decode(out[1].value)
    assert isinstance(incident, Incident)
    assert (incident.kind, incident.job, incident.ranks, incident.step) == ("nan", "j", [2], 2)
    assert out[1].key == b"j"


def test_dead_letters_of_any_size_fit_a_kafka_message() -> None:
    import base64
    import hashlib

    from trainguard.schemas.codec import decode as decode_record

    proc = processor()
    for size in (700_000, (1 << 20) + 1, 5_000_000, 20_000_000):
        value = b"{" + b"x" * (size - 1)
        out = fetch(proc, RawMessage(topic="t.gpu", value=value, partition=3, offset=77))
        assert len(out) == 1 and len(out[0].value) < 1 << 20
        letter = decode_record(out[0].value)
        assert (letter.original_size, letter.partition, letter.offset) == (size, 3, 77)
        assert letter.sha256 == hashlib.sha256(value).hexdigest()
        assert letter.truncated and value.startswith(base64.b64decode(letter.original_b64))


def test_incidents_are_signed_when_the_worker_holds_a_key() -> None:
    """Where ACLs cannot keep others off the incidents topic, act accepts only what the worker signed."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from trainguard.schemas.signing import KeyRing, Signer

    worker = Signer("worker", Ed25519PrivateKey.generate())
    proc = MessageProcessor(DetectionPipeline([NanDetector()]), Topics("t."), signer=worker)
    codec = Codec()
    bad = codec.encode(TrainingStep(ts=2.0, job="j", rank=2, node="n1", step=2, loss="nan"))
    later = codec.encode(TrainingStep(ts=8.0, job="j", rank=0, node="n0", step=3, loss=3.0))  # past settle + skew
    out = fetch(proc, RawMessage(topic="t.training", value=bad), RawMessage(topic="t.training", value=later))
    incidents = [m for m in out if m.topic == "t.incidents"]
    assert incidents and all(m.headers for m in incidents)
    ring = KeyRing({"worker": worker.private_key.public_key()})
    assert all(ring.check(m.value, m.headers) == ("worker", "") for m in incidents)
    assert all(m.headers is None for m in out if m.topic != "t.incidents")  # only incidents carry one


def test_one_bad_message_in_a_fetch_is_dead_lettered_alone_and_the_rest_are_processed() -> None:
    """A fetch is decoded in one tight loop only when every message is a plain record of its topic;
    otherwise message by message, so each bad one is named and every good one still counts."""
    codec = Codec()
    steps = [codec.encode(TrainingStep(ts=1.0 + i, job="j", rank=0, node="n0", step=i, loss=3.0)) for i in range(6)]
    samples = [codec.encode(NodeGpuSample(ts=1.0 + i, node="n0", job="j")) for i in range(6)]
    beat_on_gpu = codec.encode(Heartbeat(ts=1.0, job="j", rank=0, node="n"))
    for good, odd, topic, reason in ((steps, b'{"type":"step"', "t.training", "malformed JSON"),
                                     (steps, None, "t.training", "tombstone"),
                                     (samples, beat_on_gpu, "t.gpu", "does not belong")):
        proc = processor()
        values = [*good[:3], odd, *good[3:]]
        out = fetch(proc, *(RawMessage(topic=topic, value=v, offset=i) for i, v in enumerate(values)))
        letters = [codec.decode(m.value) for m in out if m.topic == "t.dead-letter"]
        assert [(reason in d.reason, d.offset) for d in letters] == [(True, 3)], letters
        assert proc.stats.processed == 7 and proc.stats.dead_lettered == 1
        assert proc.pipeline.watermark == 6.0  # the six good records reached the detectors

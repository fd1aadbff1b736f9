"""The codec is strict: every bad payload raises DecodeError naming the field."""

from __future__ import annotations

import json
import math

import msgspec
import pytest

from trainguard.schemas import (
    CheckpointEvent,
    Codec,
    DecodeError,
    GpuStats,
    Heartbeat,
    NodeGpuSample,
    TrainingStep,
    XidEvent,
    metric,
)
from trainguard.schemas.codec import RECORD_TYPES, json_schemas, record_tag


def gpu_sample() -> NodeGpuSample:
    gpus = [GpuStats(index=i, uuid=f"GPU-{i}", util_pct=97.0, sm_clock_mhz=1980, temp_c=61, power_w=650,
                     ecc_dbe=0, nvlink_errors=3) for i in range(8)]
    return NodeGpuSample(ts=1700000000.5, node="node-7", gpus=gpus, xids=[XidEvent(gpu=3, code=79, ts=1700000000.4)])


def test_round_trip_every_field_survives() -> None:
    codec = Codec()
    sample = gpu_sample()
    assert codec.decode(codec.encode(sample)) == sample


def test_round_trip_with_expected_type() -> None:
    codec = Codec()
    beat = Heartbeat(ts=3.0, job="j", rank=2, node="n1", phase="checkpointing")
    assert codec.decode(codec.encode(beat), expect=Heartbeat) == beat


def test_expected_type_rejects_other_record() -> None:
    codec = Codec()
    with pytest.raises(DecodeError) as err:
        codec.decode(codec.encode(Heartbeat(ts=3.0, job="j", rank=2, node="n1")), expect=TrainingStep)
    assert "type" in str(err.value)


def _same(a: float | None, b: float | None) -> bool:
    return a is b or (a is not None and b is not None and (a == b or (math.isnan(a) and math.isnan(b))))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 1.25])
def test_nonfinite_metrics_round_trip_as_floats(value: float) -> None:
    codec = Codec()
    step = TrainingStep(ts=1.0, job="j", rank=0, node="n", step=5, loss=value, grad_norm=value)
    back = codec.decode(codec.encode(step))
    assert back.loss.__class__ is float and back.grad_norm.__class__ is float
    assert _same(back.loss, value) and _same(back.grad_norm, value)


@pytest.mark.parametrize(("wire", "value"), [("nan", float("nan")), ("inf", float("inf")), ("-inf", float("-inf"))])
def test_the_wire_spells_nonfinite_metrics_as_strings_every_consumer_reads(wire: str, value: float) -> None:
    """The strings other producers send (and old recordings hold) decode to floats; NaN encodes as them again,
    never as null (msgspec's default, which a grad norm would read as 'not reported')."""
    codec = Codec()
    raw = json.dumps({"type": "step", "ts": 1.0, "job": "j", "rank": 0, "node": "n", "step": 5, "loss": wire,
                      "grad_norm": wire}).encode()
    step = codec.decode(raw)
    assert _same(step.loss, value) and _same(step.grad_norm, value)
    encoded = json.loads(codec.encode(step))
    assert encoded["loss"] == wire and encoded["grad_norm"] == wire
    assert codec.to_builtins(step)["grad_norm"] == wire
    assert _same(codec.from_builtins(codec.to_builtins(step)).grad_norm, value)


def test_finite_steps_encode_exactly_as_before() -> None:
    step = TrainingStep(ts=1.0, job="j", rank=0, node="n", step=5, loss=2.5, grad_norm=None)
    assert Codec().encode(step) == msgspec.json.encode(step)


def test_other_strings_are_still_refused() -> None:
    bad = json.dumps({"type": "step", "ts": 1.0, "job": "j", "rank": 0, "node": "n", "step": 1, "loss": "NaN!"})
    with pytest.raises(DecodeError) as err:
        Codec().decode(bad.encode())
    assert err.value.field == "loss"


def test_a_snapshot_buffer_keeps_nan_steps() -> None:
    """Worker snapshots buffer records as msgpack (streams.worker.snapshot): NaN is a float there, and old strings decode."""
    step = TrainingStep(ts=1.0, job="j", rank=0, node="n", step=5, loss=float("nan"))
    back = msgspec.msgpack.decode(msgspec.msgpack.encode(step), type=TrainingStep)
    assert math.isnan(back.loss)
    old = msgspec.msgpack.encode({**msgspec.to_builtins(step), "loss": "nan"})
    assert math.isnan(msgspec.msgpack.decode(old, type=TrainingStep).loss)


def test_metric_spells_a_float_for_the_wire() -> None:
    assert [metric(v) for v in (float("nan"), float("inf"), float("-inf"), 1.5, None)] == ["nan", "inf", "-inf", 1.5,
                                                                                            None]


def test_truncated_json() -> None:
    data = Codec().encode(gpu_sample())
    with pytest.raises(DecodeError, match="malformed JSON"):
        Codec().decode(data[: len(data) // 2])


def test_wrong_type_names_the_field() -> None:
    bad = json.dumps({"type": "step", "ts": 1.0, "job": "j", "rank": "zero", "node": "n", "step": 1, "loss": 1.0})
    with pytest.raises(DecodeError) as err:
        Codec().decode(bad.encode())
    assert err.value.field == "rank"


def test_nested_wrong_type_names_the_path() -> None:
    value = json.loads(Codec().encode(gpu_sample()))
    value["gpus"][2]["temp_c"] = "hot"
    with pytest.raises(DecodeError) as err:
        Codec().decode(json.dumps(value).encode())
    assert err.value.field == "gpus[2].temp_c"


def test_missing_required_field() -> None:
    with pytest.raises(DecodeError) as err:
        Codec().decode(b'{"type":"heartbeat","ts":1.0,"rank":0,"node":"n"}')
    assert "job" in str(err.value)


def test_unknown_field_is_refused() -> None:
    with pytest.raises(DecodeError) as err:
        Codec().decode(b'{"type":"heartbeat","ts":1.0,"job":"j","rank":0,"node":"n","colour":"red"}')
    assert err.value.field == "colour"


def test_unknown_record_type() -> None:
    with pytest.raises(DecodeError) as err:
        Codec().decode(b'{"type":"telepathy","ts":1.0}')
    assert err.value.field == "type"


def test_unknown_schema_version() -> None:
    with pytest.raises(DecodeError) as err:
        Codec().decode(b'{"type":"heartbeat","ts":1.0,"job":"j","rank":0,"node":"n","schema_version":7}')
    assert err.value.field == "schema_version"
    assert "7" in err.value.reason


def test_ten_megabyte_payload_is_refused_before_parsing() -> None:
    payload = b'{"type":"log","ts":1.0,"node":"n","level":"INFO","source":"x","message":"' + b"a" * 10_000_000 + b'"}'
    with pytest.raises(DecodeError, match="exceeds"):
        Codec().decode(payload)


def test_non_utf8_bytes() -> None:
    with pytest.raises(DecodeError):
        Codec().decode(b'{"type":"log","ts":1.0,"node":"\xff\xfe","level":"I","source":"s","message":"m"}')


def test_not_an_object() -> None:
    with pytest.raises(DecodeError):
        Codec().decode(b"[1, 2, 3]")


def test_records_are_immutable() -> None:
    ckpt = CheckpointEvent(ts=1.0, job="j", step=10, path="/c")
    with pytest.raises(AttributeError):
        ckpt.step = 11  # type: ignore[misc]


def test_every_record_type_has_a_json_schema() -> None:
    schemas = json_schemas()
    assert set(schemas) == {record_tag(cls) for cls in RECORD_TYPES}
    step = schemas["step"]
    assert "TrainingStep" in json.dumps(step)


def test_builtins_round_trip() -> None:
    codec = Codec()
    sample = gpu_sample()
    assert codec.from_builtins(codec.to_builtins(sample)) == sample


def test_a_tombstone_is_a_decode_error_not_a_crash() -> None:
    """Readers that subscribe by pattern also see the compacted act-state topic's tombstones (value None)."""
    with pytest.raises(DecodeError, match="tombstone"):
        Codec().decode(None)  # type: ignore[arg-type]

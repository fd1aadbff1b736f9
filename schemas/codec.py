"""One codec for every record: bytes <-> records, strict and fast.

msgspec validates while it parses, so a wrong type, a missing field, an
unknown field or an unknown record type is reported with the JSON path of the
field at fault. On top of that the codec refuses oversized payloads (before
parsing them) and record versions it does not understand.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Union

import msgspec

from trainguard.schemas.names import bad_name, may_hold_bad_names, problem
from trainguard.schemas.records import (
    SCHEMA_VERSION,
    ActionCommand,
    ActionResult,
    Anomaly,
    AttemptKey,
    AuditEntry,
    CheckpointEvent,
    CustomMetric,
    DeadLetter,
    Decision,
    Heartbeat,
    Incident,
    JobTopology,
    LogEvent,
    NodeCondition,
    NodeGpuSample,
    OperatorCommand,
    PhaseChange,
    RdmaSample,
    Record,
    StackSample,
    TrainingStep,
    metric,
)

RECORD_TYPES: tuple[type[Record], ...] = (
    NodeGpuSample,
    RdmaSample,
    TrainingStep,
    Heartbeat,
    PhaseChange,
    CheckpointEvent,
    LogEvent,
    StackSample,
    JobTopology,
    AttemptKey,
    NodeCondition,
    CustomMetric,
    Anomaly,
    Incident,
    Decision,
    ActionCommand,
    ActionResult,
    AuditEntry,
    OperatorCommand,
    DeadLetter,
)
AnyRecord = Union[RECORD_TYPES]  # type: ignore[valid-type]  # noqa: UP007 (a tuple unpacks only into Union[...])

DEFAULT_MAX_BYTES = 1 << 20
# `decode_all` checks the payloads' bytes this many at a time. All of a fetch's at once (thousands of GPU
# samples, megabytes) were copied into a buffer too large for any cache: a write miss per 64 bytes, the
# worker's most missed copy at 12,500 nodes (issue 23, counted). A run's buffer (tens of KiB) is reused warm.
CHECK_RUN = 32
_WIRED = frozenset({TrainingStep, CustomMetric})  # records whose metrics may be non-finite (see `wire`)
_PATH = re.compile(r"at `\$\.?([^`]*)`|unknown field `([^`]*)`")


class DecodeError(ValueError):
    """A payload is not a valid record. `field` names the culprit, if one."""

    def __init__(self, reason: str, field: str = "") -> None:
        super().__init__(f"{reason} (field: {field})" if field else reason)
        self.reason = reason
        self.field = field


def wire(record: Record) -> Any:
    """`record` as it goes on the wire: a step's NaN or Inf metrics spelled "nan", "inf", "-inf".

    msgspec writes a non-finite float as null, which no reader could tell
    from a missing grad norm; the strings are what producers have always
    sent, so every consumer reads them. A custom metric's values likewise.
    Anything else passes as it is.

    >>> step = TrainingStep(ts=1.0, job="j", rank=0, node="n", step=1, loss=float("nan"))
    >>> wire(step)["loss"], wire(step.__class__(ts=1.0, job="j", rank=0, node="n", step=1, loss=2.0)).loss
    ('nan', 2.0)
    """
    if isinstance(record, CustomMetric):
        if all(math.isfinite(v) for v in record.values.values()):
            return record
        custom: dict[str, Any] = msgspec.to_builtins(record)
        custom["values"] = {k: metric(v) for k, v in record.values.items()}
        return custom
    if not isinstance(record, TrainingStep):
        return record
    loss, grad = record.loss, record.grad_norm
    if math.isfinite(loss) and (grad is None or math.isfinite(grad)):
        return record
    out: dict[str, Any] = msgspec.to_builtins(record)
    out["loss"], out["grad_norm"] = metric(loss), metric(grad)
    return out


def record_tag(cls: type[Record]) -> str:
    """The `type` tag that a record class is written with."""
    return str(cls.__struct_config__.tag)


class Codec:
    """Encodes and decodes records. Holds reusable msgspec encoder/decoders.

    >>> from trainguard.schemas.records import Heartbeat
    >>> codec = Codec()
    >>> data = codec.encode(Heartbeat(ts=1.0, job="j", rank=0, node="n0"))
    >>> codec.decode(data).rank
    0
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._encoder = msgspec.json.Encoder()
        self._decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(AnyRecord)
        self._typed: dict[type[Record], msgspec.json.Decoder[Any]] = {}

    def encode(self, record: Record) -> bytes:
        """Serialise one record to compact JSON bytes (non-finite metrics as strings, see `wire`)."""
        return self._encoder.encode(wire(record) if record.__class__ in _WIRED else record)

    def decode(self, data: bytes | bytearray | memoryview | str, expect: type[Record] | None = None) -> Any:
        """Parse and validate one record; raise `DecodeError` naming the field.

        `expect` restricts the payload to one record type (and is faster).
        """
        if data is None:  # a Kafka tombstone reaches readers that subscribe by pattern
            raise DecodeError("no payload (a tombstone)")
        if len(data) > self.max_bytes:
            raise DecodeError(f"payload of {len(data)} bytes exceeds the {self.max_bytes}-byte limit")
        decoder = self._decoder if expect is None else self._typed_decoder(expect)
        try:
            record = decoder.decode(data)
        except msgspec.ValidationError as exc:
            raise DecodeError(str(exc), _field_of(str(exc))) from None
        except msgspec.DecodeError as exc:
            raise DecodeError(f"malformed JSON: {exc}") from None
        except UnicodeDecodeError as exc:
            raise DecodeError(f"payload is not UTF-8: {exc.reason}") from None
        if may_hold_bad_names(data):  # the compact ASCII collectors write cannot: no walk (the hot path)
            _good_names(record)
        return _supported(record)

    def decode_all(self, values: Sequence[bytes | None]) -> list[Any] | None:
        """Every payload of a batch decoded in one tight loop, or None: then `decode` each.

        The hot path of a consumer: the checks `decode` makes per payload
        are made once over the batch (size; no payload that could hold a
        forbidden name; no tombstone) and msgspec is called directly. Any
        payload that would need `decode`'s handling (a tombstone, an
        oversize, malformed or invalid one, a possible bad name, another
        schema version) gives None, and the caller decodes one by one, so
        each fault is named exactly as `decode` names it.

        >>> from trainguard.schemas.records import Heartbeat
        >>> codec = Codec()
        >>> beat = codec.encode(Heartbeat(ts=1.0, job="j", rank=0, node="n0"))
        >>> [r.rank for r in codec.decode_all([beat, beat])], codec.decode_all([beat, b"{"])
        ([0, 0], None)
        """
        for start in range(0, len(values), CHECK_RUN):
            run = values[start:start + CHECK_RUN]
            try:
                joined = b"".join(run)  # type: ignore[arg-type]  # a tombstone (None) raises TypeError
            except TypeError:
                return None
            if len(joined) > self.max_bytes and max(map(len, run)) > self.max_bytes:  # type: ignore[arg-type]
                return None
            if may_hold_bad_names(joined):  # a run's bytes at once: plain ASCII, no escape, no DEL in any
                return None
        decode = self._decoder.decode
        try:
            records = [decode(v) for v in values]  # type: ignore[arg-type]
        except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
            return None
        for record in records:
            if record.schema_version != SCHEMA_VERSION:
                return None
        return records

    def to_builtins(self, record: Record) -> dict[str, Any]:
        """The record as plain JSON-ready Python objects (for recordings)."""
        out: dict[str, Any] = msgspec.to_builtins(wire(record))
        return out

    def from_builtins(self, value: Any, expect: type[Record] | None = None) -> Any:
        """Validate plain Python objects (a parsed JSON object) as a record."""
        try:
            record = msgspec.convert(value, AnyRecord if expect is None else expect)
        except msgspec.ValidationError as exc:
            raise DecodeError(str(exc), _field_of(str(exc))) from None
        _good_names(record)
        return _supported(record)

    def _typed_decoder(self, cls: type[Record]) -> msgspec.json.Decoder[Any]:
        decoder = self._typed.get(cls)
        if decoder is None:
            decoder = self._typed[cls] = msgspec.json.Decoder(cls)
        return decoder


def _good_names(record: Any) -> None:
    """Refuse a record whose names hold a control or bidirectional character, naming the field."""
    where = bad_name(record)
    if where is not None:
        raise DecodeError(problem(where), where)


def _supported(record: Any) -> Any:
    """The record, if this build reads its schema version."""
    if record.schema_version != SCHEMA_VERSION:
        raise DecodeError(
            f"unsupported schema_version {record.schema_version} (this build reads {SCHEMA_VERSION})",
            "schema_version",
        )
    return record


def _field_of(message: str) -> str:
    match = _PATH.search(message)
    if not match:
        return ""
    return match.group(1) if match.group(1) is not None else match.group(2)


_DEFAULT = Codec()


def encode(record: Record) -> bytes:
    """Encode with a shared default codec (stateless, safe to share)."""
    return _DEFAULT.encode(record)


def decode(data: bytes | bytearray | memoryview | str, expect: type[Record] | None = None) -> Any:
    """Decode with a shared default codec; see `Codec.decode`."""
    return _DEFAULT.decode(data, expect)


def json_schemas() -> dict[str, dict[str, Any]]:
    """JSON Schema documents, one per record type, keyed by the type tag."""
    out: dict[str, dict[str, Any]] = {}
    for cls in RECORD_TYPES:
        out[record_tag(cls)] = msgspec.json.schema(cls)
    return out

"""Names (nodes, jobs, GPUs, ports) carry no control or bidirectional characters: checked once per payload.

A name with an escape sequence or a right-to-left override prints as
another in a terminal, a log or the console, so every record field typed
`Name` or `JobName` refuses them (issue 21). msgspec could check this with a
`pattern` on each name, but that is one regular-expression call per name:
half the cost of decoding an 8-GPU sample (its eight GPU UUIDs, the node,
the job). Here the check runs after decoding, and only on payloads that
could hold such a character at all. A JSON text can put one in a string
only through a byte outside ASCII, a backslash escape or a raw DEL (JSON
forbids raw C0 characters inside strings, and msgspec refuses them), so
the compact ASCII our collectors write skips it; everything else is walked.

Which fields are names is read from the schema itself: their `msgspec.Meta`
carries `extra=NAME_MARK`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec

NAME_PATTERN = "^[^\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]*$"  # what a name may hold
NAME_MARK = {"name": True}  # the `extra` of a name field's Meta
_BAD = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")

Check = Callable[[Any], "str | None"]  # a value -> the path below it of its first bad name, or None


def may_hold_bad_names(data: bytes | bytearray | memoryview | str) -> bool:
    """False when no string of this JSON text can hold a forbidden character (ASCII, no escape, no DEL).

    >>> may_hold_bad_names(b'{"node":"n0"}'), may_hold_bad_names(b'{"node":"n\\\\u202e"}')
    (False, True)
    """
    if isinstance(data, memoryview):
        data = data.tobytes()
    if isinstance(data, str):
        return not data.isascii() or data.find("\\") >= 0 or data.find("\x7f") >= 0
    return not data.isascii() or data.find(b"\\") >= 0 or data.find(b"\x7f") >= 0  # find: faster than `in` here


def bad_name(record: msgspec.Struct) -> str | None:
    """The path (`gpus[0].uuid`) of the record's first name holding a forbidden character, or None.

    >>> from trainguard.schemas.records import GpuStats, Heartbeat, NodeGpuSample
    >>> bad_name(Heartbeat(ts=1.0, job="j", rank=0, node="n0"))
    >>> bad_name(Heartbeat(ts=1.0, job="j\\x1b", rank=0, node="n"))
    'job'
    >>> bad_name(NodeGpuSample(ts=1.0, node="n", gpus=[GpuStats(index=0), GpuStats(index=1, uuid="GPU\\u202e")]))
    'gpus[1].uuid'
    """
    return _checker(type(record))(record)


def problem(path: str) -> str:
    """The reason given for a bad name at `path`, in words (an operator reads it in the dead-letter topic)."""
    return f"a name with a control or bidirectional character - at `$.{path}`"


_CHECKERS: dict[type, Check] = {}


def _checker(cls: type) -> Check:
    found = _CHECKERS.get(cls)
    if found is None:
        found = _CHECKERS[cls] = _struct_check(msgspec.inspect.type_info(cls))  # type: ignore[arg-type]
    return found


def _struct_check(info: msgspec.inspect.StructType) -> Check:
    """A check of every name reachable from one struct's fields (none: a check that finds nothing)."""
    parts = [(f.name, inner) for f in info.fields if (inner := _type_check(f.type)) is not None]

    def check(value: Any) -> str | None:
        for name, inner in parts:
            where = inner(getattr(value, name))
            if where is not None:
                return _join(name, where)
        return None

    return check


def _type_check(t: msgspec.inspect.Type) -> Check | None:
    """The check of one field type, or None when no name can be inside it."""
    if isinstance(t, msgspec.inspect.Metadata):
        if t.extra == NAME_MARK:
            return lambda v: "" if isinstance(v, str) and _BAD.search(v) else None
        return _type_check(t.type)
    if isinstance(t, msgspec.inspect.StructType):
        cls = t.cls
        return lambda v: _checker(cls)(v) if isinstance(v, cls) else None
    if isinstance(t, msgspec.inspect.ListType | msgspec.inspect.VarTupleType):
        return _each(_type_check(t.item_type), lambda v: enumerate(v) if isinstance(v, list | tuple) else ())
    if isinstance(t, msgspec.inspect.DictType):
        return _each(_type_check(t.value_type), lambda v: v.items() if isinstance(v, dict) else ())
    if isinstance(t, msgspec.inspect.UnionType):
        return _union(t)
    return None


def _union(t: msgspec.inspect.UnionType) -> Check | None:
    """A union's check: a struct member's by the value's class, the others' each (they test the value's kind)."""
    structs = {m.cls for m in t.types if isinstance(m, msgspec.inspect.StructType)}  # checked when met (late)
    others = [c for m in t.types if not isinstance(m, msgspec.inspect.StructType) and (c := _type_check(m))]
    if not structs and not others:
        return None

    def check(value: Any) -> str | None:
        if type(value) in structs:
            return _checker(type(value))(value)
        return next((where for c in others if (where := c(value)) is not None), None)

    return check


def _each(inner: Check | None, entries: Callable[[Any], Any]) -> Check | None:
    if inner is None:
        return None

    def check(value: Any) -> str | None:
        for key, item in entries(value):
            where = inner(item)
            if where is not None:
                return _join(f"[{key}]", where)
        return None

    return check


def _join(head: str, where: str) -> str:
    """`head` and the path below it: `gpus` + `[1].uuid`, `[1]` + `uuid` -> `[1].uuid`, `job` + `` -> `job`."""
    return head + where if not where or where.startswith("[") else f"{head}.{where}"

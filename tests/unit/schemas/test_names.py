"""Names are checked after decoding, only where a payload could hide a bad one (schemas.names).

The rule is the one the schema's pattern stated: no C0/C1 control character
and no bidirectional control anywhere in a name (node, job, GPU UUID, RDMA
device, a topology's rank nodes). These tests hold the codec to it on random
names, written every way a producer may write JSON (escaped ASCII, raw
UTF-8, a raw DEL), and check that the skip taken for plain ASCII payloads
is sound: no payload it skips can decode to a bad name.
"""

from __future__ import annotations

import json
import re

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.bench_codec import sample
from trainguard.schemas.codec import Codec, DecodeError, json_schemas
from trainguard.schemas.names import NAME_PATTERN, may_hold_bad_names
from trainguard.streams.recording import RecordingError, parse_line

FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# Names as fleets write them, and every kind of hostile character.
PIECES = ["node-0417", "llm-7b.run_3", "训练", "Ünï", " ", "/", ":", "\\", '"', "\x00", "\x1b[2J", "\n", "\t",
          "\x7f", "\x85", "\x9f", "\u061c", "\u200e", "\u202e", "\u2066", "\u2069", "\u00a0", "\u200b", "é"]
names = st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map("".join)


def _shapes(name: str) -> list[tuple[dict[str, object], str]]:
    """Records with `name` in each kind of name field, and the path the codec must name."""
    step = {"type": "step", "ts": 1.7e9, "job": "llm", "rank": 0, "node": "n0", "step": 1, "loss": 2.0}
    return [
        ({**step, "job": name}, "job"),
        ({**step, "node": name}, "node"),
        ({"type": "gpu_sample", "ts": 1.7e9, "node": "n0",
          "gpus": [{"index": 0, "uuid": "GPU-0"}, {"index": 1, "uuid": name}]}, "gpus[1].uuid"),
        ({"type": "rdma_sample", "ts": 1.7e9, "node": "n0", "ports": [{"device": name, "port": 1}]},
         "ports[0].device"),
        ({"type": "topology", "ts": 1.7e9, "job": "llm", "world_size": 2, "rank_nodes": {"0": "n0", "1": name}},
         "rank_nodes[1]"),
    ]


def _builtins(payload: dict[str, object]) -> dict[str, object]:
    """The payload as Python objects give it (`Codec.from_builtins`): a topology's ranks are ints there."""
    ranks = payload.get("rank_nodes")
    return {**payload, "rank_nodes": {int(k): v for k, v in ranks.items()}} if isinstance(ranks, dict) else payload


def _writings(payload: dict[str, object]) -> list[bytes]:
    """One record as producers write it: escaped ASCII, raw UTF-8, and msgspec's own (raw UTF-8, \\u escapes)."""
    return [json.dumps(payload).encode(), json.dumps(payload, ensure_ascii=False).encode(), msgspec.json.encode(payload)]


@settings(max_examples=300, deadline=None)
@given(name=names)
def test_a_name_is_refused_exactly_when_it_holds_a_forbidden_character(name: str) -> None:
    codec = Codec()
    for payload, path in _shapes(name):
        for data in _writings(payload):
            if FORBIDDEN.search(name):
                with pytest.raises(DecodeError) as err:
                    codec.decode(data)
                assert err.value.field == path and "control or bidirectional character" in str(err.value)
                with pytest.raises(DecodeError):
                    codec.from_builtins(_builtins(payload))
            else:
                codec.decode(data)
                codec.from_builtins(_builtins(payload))


@settings(max_examples=500, deadline=None)
@given(text=st.text(max_size=40))
def test_a_payload_the_check_skips_cannot_hold_a_forbidden_character(text: str) -> None:
    """Soundness of the skip: whatever a JSON text decodes to, if it is skipped its strings are clean."""
    for data in (json.dumps({"s": text}).encode(), json.dumps({"s": text}, ensure_ascii=False).encode(),
                 msgspec.json.encode({"s": text})):
        if not may_hold_bad_names(data):
            assert not FORBIDDEN.search(msgspec.json.decode(data)["s"])


def test_a_raw_del_is_caught_though_json_lets_it_through_unescaped() -> None:
    raw = b'{"type":"heartbeat","ts":1.7e9,"job":"j\x7f","rank":0,"node":"n0"}'
    with pytest.raises(DecodeError) as err:
        Codec().decode(raw)
    assert err.value.field == "job"


def test_what_collectors_write_takes_the_fast_path() -> None:
    """The compact ASCII of an 8-GPU sample is not walked: that is the speed-up (bench_codec)."""
    assert not may_hold_bad_names(Codec().encode(sample()))


def test_a_trailing_newline_is_refused_which_the_old_pattern_let_through() -> None:
    """`^[^...]*$` matched before a final newline (Python's `$`), so "llm\\n" passed; a name is now checked
    character by character."""
    assert re.search(NAME_PATTERN, "llm\n")
    step = {"type": "heartbeat", "ts": 1.7e9, "job": "llm\n", "rank": 0, "node": "n0"}
    with pytest.raises(DecodeError):
        Codec().decode(json.dumps(step).encode())


def test_a_recording_line_with_a_bad_name_names_it() -> None:
    line = json.dumps({"topic": "training", "key": "j", "ts": 1.0,
                       "value": {"type": "heartbeat", "ts": 1.0, "job": "j\u202e", "rank": 0, "node": "n0"}})
    with pytest.raises(RecordingError) as err:
        parse_line(line, "r.jsonl", 7)
    assert "r.jsonl:7" in str(err.value) and "`$.value.job`" in str(err.value)


def test_the_published_schema_still_states_the_pattern() -> None:
    """Producers that validate against `trainguard schemas` keep the rule, though the codec checks it itself."""
    node = json_schemas()["heartbeat"]["$defs"]["Heartbeat"]["properties"]["node"]
    assert node["pattern"] == NAME_PATTERN and node["maxLength"] == 256

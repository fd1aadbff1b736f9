"""The log parser on genuine torchrun / torch.distributed.elastic output.

The fixtures were captured from a real `torchrun --nproc_per_node=2` (torch 2.15, CPU) running
`fixtures/torchrun_failing_script.py`, whose rank 1 loads a state dict of the wrong shape:
plain output, `--tee 3` (`[default1]:` prefixes), `--log-line-prefix-template '[rank${rank}]:'`, and the
error file `@record` wrote (TORCHELASTIC_ERROR_FILE).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.collectors.logs import LogParser, error_file_event
from trainguard.detectors.logs import classify
from trainguard.schemas.records import LogEvent

FIXTURES = Path(__file__).parent / "fixtures"


def parse(name: str) -> list[LogEvent]:
    parser = LogParser(node="n0", source="stderr", job="j")
    lines = (FIXTURES / name).read_text().split("\n")
    return [e for i, line in enumerate(lines) for e in parser.feed(line, float(i))] + parser.flush()


@pytest.mark.parametrize("name", ["torchrun_rank_prefix.stderr.txt", "torchrun_tee_default_prefix.stderr.txt"])
def test_prefixed_rank_traceback_keeps_its_size_mismatch_lines_and_rank(name: str) -> None:
    events = [e for e in parse(name) if e.category == "traceback" and e.rank == 1
              and not e.message.startswith("ChildFailedError")]
    assert len(events) == 1
    message = events[0].message
    assert message.startswith("RuntimeError: Error(s) in loading state_dict for Linear:")
    assert "size mismatch for weight" in message and "size mismatch for bias" in message
    assert classify(events[0]) == ("user", "size mismatch")


def test_child_failed_error_summary_names_the_root_cause_rank_exit_code_and_exception() -> None:
    events = [e for e in parse("torchrun_plain.stderr.txt") if e.message.startswith("ChildFailedError")]
    assert len(events) == 1
    summary = events[0]
    assert (summary.rank, summary.exit_code, summary.category) == (1, 1, "traceback")
    assert "RuntimeError: Error(s) in loading state_dict for Linear:" in summary.message
    assert "size mismatch for bias" in summary.message
    assert classify(summary)[0] == "user"


def test_the_plain_child_traceback_is_parsed_too() -> None:
    events = [e for e in parse("torchrun_plain.stderr.txt") if e.message.startswith("RuntimeError")]
    assert len(events) == 1 and "size mismatch for weight" in events[0].message


def test_error_file_gives_the_childs_exception() -> None:
    event = error_file_event((FIXTURES / "torchelastic_error_file.json").read_text(), node="n0", source="elastic",
                             ts=5.0, job="j", rank=1)
    assert event is not None
    assert event.message.startswith("RuntimeError: Error(s) in loading state_dict")
    assert "size mismatch for weight" in event.message
    assert (event.rank, event.exit_code, event.category) == (1, 1, "traceback")
    assert error_file_event("not json", node="n0", source="elastic", ts=5.0) is None


def test_a_prefix_is_stripped_before_the_continuation_check() -> None:
    """The bug: '[rank3]:\\tsize mismatch' did not start with whitespace, so the message was cut."""
    parser = LogParser(node="n0", source="train")
    lines = ["[rank3]:Traceback (most recent call last):", '[rank3]:  File "t.py", line 1, in <module>',
             "[rank3]:RuntimeError: Error(s) in loading state_dict for Net:",
             "[rank3]:\tsize mismatch for fc.weight: copying a param with shape torch.Size([2])",
             "[rank0]:step 5 loss 2.1"]
    events = [e for line in lines for e in parser.feed(line, 1.0)] + parser.flush()
    assert [(e.rank, e.message.count("\n")) for e in events] == [(3, 1)]
    assert "size mismatch for fc.weight" in events[0].message

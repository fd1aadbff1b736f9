"""Traceback events keep their multi-line exception message."""

from __future__ import annotations

from collectors.logs import LogParser


def test_multi_line_exception_message_is_kept_whole() -> None:
    """PyTorch puts the useful part ("size mismatch for ...") on indented lines after the exception line."""
    parser = LogParser(node="n0", source="train")
    lines = [
        "Traceback (most recent call last):",
        '  File "train.py", line 9, in <module>',
        "    model.load_state_dict(state)",
        "RuntimeError: Error(s) in loading state_dict for Sequential:",
        "\tsize mismatch for 2.weight: copying a param with shape torch.Size([1, 256]) from checkpoint,",
        "epoch 3 done",
    ]
    events = [e for line in lines for e in parser.feed(line, 1.0)]
    assert len(events) == 1 and events[0].category == "traceback"
    assert events[0].message.startswith("RuntimeError: Error(s) in loading state_dict")
    assert "size mismatch for 2.weight" in events[0].message
    assert parser.flush() == []

"""Traceback events keep their multi-line exception message."""

from __future__ import annotations

from trainguard.collectors.logs import LogParser


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


def test_stack_samples_take_the_rank_the_hook_reported(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A rank that joined a rendezvous itself has no RANK variable; its hook's progress file names it."""
    from trainguard.collectors.agent.hang_watch import progress_rank
    from trainguard.training_hook import _write_progress

    _write_progress(tmp_path, 12, "training", 3)
    import os

    assert progress_rank(tmp_path, os.getpid()) == 3
    assert progress_rank(tmp_path, 999_999_999) is None

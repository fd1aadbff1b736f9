"""The log parser on literal lines, and the file follower on a real file."""

from __future__ import annotations

from pathlib import Path

from trainguard.collectors.logs import FileFollower, LogParser


def _feed(lines: list[str]) -> list:  # type: ignore[type-arg]
    parser = LogParser(node="n0", source="train", job="j")
    events = [e for i, line in enumerate(lines) for e in parser.feed(line, float(i))]
    return events + parser.flush()  # as the agent does when the process's output ends


def test_categories_of_single_lines() -> None:
    events = _feed([
        "[12345.6] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "node1:123:456 [0] NCCL WARN NET/IB : Got completion with error 12",
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
        "[rank3]:[E ProcessGroupNCCL.cpp:563] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)",
        "6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error",
        "epoch 1 step 20 loss 2.31",
    ])
    assert [(e.category, e.level) for e in events] == [
        ("xid", "error"), ("cuda", "error"), ("nccl", "warning"), ("nccl", "error"), ("nccl", "error"), ("xid", "error")]
    assert events[4].rank == 3 and events[4].message.startswith("[E ProcessGroupNCCL")
    assert events[5].message.startswith("NVRM: Xid")  # the /dev/kmsg prefix is stripped
    assert all(e.node == "n0" and e.job == "j" for e in events)


def test_traceback_is_one_event_with_the_exception_line() -> None:
    events = _feed([
        "step 3",
        "Traceback (most recent call last):",
        '  File "/w/train.py", line 40, in <module>',
        "    main()",
        '  File "/w/train.py", line 31, in main',
        "    loss.backward()",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "after",
    ])
    assert len(events) == 1
    assert events[0].category == "traceback"
    assert events[0].message == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def test_chained_traceback_reports_the_final_exception_and_ranked_lines() -> None:
    events = _feed([
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "a.py", line 1, in f',
        "[rank1]: KeyError: 'x'",
        "OOM: CUDA out of memory. Tried to allocate 20 MiB",
    ])
    assert [(e.category, e.rank, e.message) for e in events] == [
        ("traceback", 1, "KeyError: 'x'"), ("oom", None, "OOM: CUDA out of memory. Tried to allocate 20 MiB")]
    chained = _feed(["Traceback (most recent call last):", '  File "a.py", line 1, in f', "ValueError: a", "",
                     "During handling of the above exception, another exception occurred:", "",
                     "Traceback (most recent call last):", '  File "a.py", line 3, in g', "RuntimeError: b"])
    assert [e.message for e in chained] == ["ValueError: a", "RuntimeError: b"]


def test_exit_event() -> None:
    parser = LogParser(node="n0", source="agent", job="j")
    event = parser.exit_event(-9, 5.0)
    assert (event.category, event.exit_code, event.level) == ("exit", -9, "error")


def test_file_follower_handles_partial_lines_and_rotation(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text("old line\n")
    follower = FileFollower(path)
    assert follower.read_lines() == []  # starts at the end, like tail -F
    with path.open("a") as f:
        f.write("one\ntw")
    assert follower.read_lines() == ["one"]
    with path.open("a") as f:
        f.write("o\n")
    assert follower.read_lines() == ["two"]
    path.rename(tmp_path / "train.log.1")
    path.write_text("fresh\n")
    assert follower.read_lines() == ["fresh"]
    path.unlink()
    assert follower.read_lines() == []


def test_kernel_log_absent_is_tolerated_and_reported_once(tmp_path: Path) -> None:
    from trainguard.collectors.logs import KernelLog

    warnings: list[str] = []
    kmsg = KernelLog(tmp_path / "no-kmsg", warn=warnings.append)
    assert kmsg.read_lines() == [] and kmsg.read_lines() == []
    assert len(warnings) == 1 and "unreadable" in warnings[0]
def test_a_doubly_prefixed_traceback_is_one_event_of_the_outer_rank() -> None:
    """torch's excepthook prefixes `[rankN]:` inside a launcher that prefixes again (seen in the demo)."""
    p = LogParser(node="n", source="stderr")
    lines = ["[rank1]: [rank2]: Traceback (most recent call last):",
             '[rank1]: [rank2]:   File "train.py", line 98, in main',
             "[rank1]: [rank2]:     loss = model(x)",
             "[rank1]: [rank2]: RuntimeError: addmm: mat1 and mat2 shapes cannot be multiplied (64x63 and 64x256)"]
    events = [e for i, line in enumerate(lines) for e in p.feed(line, float(i))] + p.flush()
    assert [(e.category, e.rank, e.message.split(":")[0]) for e in events] == [("traceback", 1, "RuntimeError")]

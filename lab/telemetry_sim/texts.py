"""Log lines and stack frames the simulator emits, kept apart from the logic.

The texts copy the shape of what PyTorch, NCCL and Python really print, so
a detector that parses them is tested on something believable.
"""

from __future__ import annotations

TRACEBACKS: dict[str, str] = {
    "import_error": (
        'Traceback (most recent call last):\n  File "/workspace/train.py", line 14, in <module>\n'
        "    from model.moe import GroupedMoELayer\n"
        "ImportError: cannot import name 'GroupedMoELayer' from 'model.moe' (/workspace/model/moe.py)"
    ),
    "shape_mismatch": (
        'Traceback (most recent call last):\n  File "/workspace/train.py", line 211, in train_step\n'
        "    out = model(batch)\n  File \"/workspace/model/mlp.py\", line 48, in forward\n"
        "    return self.down(self.act(self.up(x)))\n"
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8192x4096 and 5120x14336)"
    ),
    "syntax_error": (
        'Traceback (most recent call last):\n  File "/workspace/train.py", line 9, in <module>\n'
        "    from config import build_config\n  File \"/workspace/config.py\", line 77\n"
        "    lr_schedule = cosine(warmup=2000,, total=steps)\n                                     ^\n"
        "SyntaxError: invalid syntax"
    ),
    "oom": (
        'Traceback (most recent call last):\n  File "/workspace/train.py", line 211, in train_step\n'
        "    loss.backward()\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.50 GiB. "
        "GPU 0 has a total capacity of 79.10 GiB of which 3.12 GiB is free."
    ),
}

# An application CUDA error as every rank of a job prints it: through the NCCL watchdog (so it reads as NCCL).
APP_CUDA_ERRORS: tuple[str, ...] = (
    "terminate called after throwing an instance of 'c10::DistBackendError'\n  what():  [PG 0 Rank {rank}] Process "
    "group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\nException raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43\n"
    "frame #4: c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal() const",
    "terminate called after throwing an instance of 'c10::DistBackendError'\n  what():  [PG 0 Rank {rank}] Process "
    "group watchdog thread terminated with exception: CUDA error: unspecified launch failure\n"
    "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43\n"
    "frame #4: c10d::ProcessGroupNCCL::WorkNCCL::isCompleted()",
)
# What torchrun's agent says of a child that died before its first step with no traceback and no error file
# (collectors.agent.error_file words it so), and torchrun's own summary on stderr.
SILENT_EXIT = "process exited with code {code} before its first step, saying nothing (no traceback, no error file)"
TORCHRUN_SUMMARY = (
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n============================\n"
    "train.py FAILED\n----------------------------\nFailures:\n  <NO_OTHER_FAILURES>\nRoot Cause (first observed "
    "failure):\n[0]:\n  exitcode  : {code} (pid: {pid})\n  error_file: <N/A>\n  traceback : To enable "
    "traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
)

CRASH_LOGS: dict[str, str] = {
    "hw_fault": ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda "
                 "error, NCCL version 2.21.5; Last error: Cuda failure 'unspecified launch failure'"),
    "network": ("NCCL WARN NET/IB : Got completion from peer 10.0.3.17<52341> with status=12 opcode=0 len=0 "
                "vendor err 129 (Send) localGid ::ffff:10.0.3.9 (transport retry counter exceeded)"),
    "hang": ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88211, OpType=ALLREDUCE, "
             "NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600003 milliseconds before timing out."),
}

BENIGN_LOGS: tuple[tuple[str, str, str], ...] = (
    ("INFO", "nccl", "NCCL INFO comm 0x55d1c3a0 rank 0 nranks 64 cudaDev 0 busId 1b000 - Init COMPLETE"),
    ("WARNING", "python", "UserWarning: TypedStorage is deprecated. It will be removed in the future."),
    ("INFO", "python", "dataloader: prefetch queue refilled (depth 8)"),
    ("WARNING", "kernel", "mlx5_core 0000:3b:00.0: mlx5_cmd_out_err: QUERY_VPORT_COUNTER(0x770) op_mod(0x0) "
                          "failed, status bad parameter(0x3), syndrome (0x1ac4f6)"),
    ("INFO", "python", "lr scheduler: warmup finished, cosine decay started"),
)

_BASE = ["/workspace/train.py:<module>", "/workspace/train.py:main", "/workspace/train.py:train_step"]
HEALTHY_STACKS: tuple[list[str], ...] = (
    _BASE + ["/workspace/model/block.py:forward", "torch/nn/modules/linear.py:forward"],
    _BASE + ["torch/_tensor.py:backward", "torch/autograd/graph.py:_engine_run_backward"],
    _BASE + ["torch/optim/adamw.py:step", "torch/optim/adamw.py:_multi_tensor_adamw"],
)
WAITING_STACK = _BASE + ["torch/distributed/c10d_logger.py:wrapper",
                         "torch/distributed/distributed_c10d.py:all_reduce", "ProcessGroupNCCL::WorkNCCL::wait"]
CULPRIT_STACKS: dict[str, list[str]] = {
    "dataloader": _BASE + ["torch/utils/data/dataloader.py:__next__", "torch/utils/data/dataloader.py:_next_data",
                           "multiprocessing/queues.py:get", "threading.py:wait"],
    "collective": _BASE + ["/workspace/model/moe.py:forward", "torch/distributed/distributed_c10d.py:all_to_all_single",
                           "ProcessGroupNCCL::WorkNCCL::wait"],
    "cuda_sync": _BASE + ["/workspace/train.py:log_metrics", "torch/cuda/__init__.py:synchronize",
                          "cudaDeviceSynchronize"],
}

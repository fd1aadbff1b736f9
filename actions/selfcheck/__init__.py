"""Stop-time diagnosis: hierarchical self-checks and the SDC replay, in torch.

Written against `torch.distributed` with the gloo backend, so the same code
runs on CPUs in the tests and, with NCCL swapped in, on GPU machines.
"""

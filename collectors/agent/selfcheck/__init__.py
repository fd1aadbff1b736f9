"""Stop-time diagnosis on a node: hierarchical self-checks and the SDC replay, in torch.

Written against `torch.distributed` with the gloo backend, so the same code
runs on CPUs in the tests and, with NCCL swapped in, on GPU machines. The
verdict over the machines' reports is pure and shared with act
(`schemas.selfcheck`); act's fan-out is `actions.selfcheck.fanout`.
"""

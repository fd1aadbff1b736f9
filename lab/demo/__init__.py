"""The demo: a real torch.distributed job under `trainguard run`, faults injected one by one."""

"""Executors: the thin edges that carry out commands (agents, Kubernetes, Slurm)."""

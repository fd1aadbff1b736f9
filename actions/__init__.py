"""From incidents to decisions, and from decisions to safe actions.

The decision engine and its safety rails are pure (event time in, plans
out); executors are the thin edges that touch processes, Kubernetes or
Slurm. Nothing here imports a Kafka client.
"""

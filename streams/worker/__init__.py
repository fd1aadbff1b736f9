"""`trainguard worker`: telemetry in, detectors over it, anomalies, incidents and dead letters out.

Built by `factory.create_worker_app`; the batch loop consumes, the
processor routes records through each task's detection pipeline, and the
snapshot module keeps detector state across restarts.
"""

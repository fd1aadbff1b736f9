"""Node-side collectors: GPUs (NVML), RDMA, logs, stacks, and the on-node agent (`agent/`).

They depend only on `schemas`. Reading is kept apart from parsing so every
parser is tested on literal inputs; the Kafka publisher and the agent's
command feed are the only modules here that import a Kafka client.
"""

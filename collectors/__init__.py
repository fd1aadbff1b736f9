"""Node-side collectors: GPUs (NVML), RDMA, training processes, logs, stacks.

They depend only on `schemas`. Reading is kept apart from parsing so every
parser is tested on literal inputs, and the Kafka publisher is the only
module here that imports a Kafka client.
"""

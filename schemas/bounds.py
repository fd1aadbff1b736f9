"""What a host may report: the bounds every record field is decoded under.

A value outside these is refused by the codec and dead-lettered with its
reason, so no record can make a detector's arithmetic absurd (a negative step
that outranks nothing, a timestamp of -1e308) or its state huge (a node name
of a million characters, thirty of which made one snapshot 22 MB). The bounds
are far beyond any real fleet: 2^40 steps, 2^20 ranks, 1024 GPUs per node.
`schemas.records` builds its fields from these types.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from trainguard.schemas.names import NAME_MARK, NAME_PATTERN

MAX_NAME_CHARS = 256  # job, node, device and host names (Kubernetes' own names stop at 253)
MAX_STEP = 1 << 40
MAX_RANKS = 1 << 20
MAX_GPUS = 1024
MAX_TS = 1e10  # seconds since the epoch: the year 2286; a host a day or a year off still passes
# C0/C1 control characters and Unicode's bidirectional controls (a right-to-left override
# makes a job name print as another): refused anywhere in a name. The codec checks names after
# decoding (`schemas.names`: a msgspec pattern per name cost half of decoding an 8-GPU sample);
# the published JSON schema still states the pattern.
Name = Annotated[str, msgspec.Meta(max_length=MAX_NAME_CHARS, extra=NAME_MARK,
                                   extra_json_schema={"pattern": NAME_PATTERN})]
JobName = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS, extra=NAME_MARK,
                                      extra_json_schema={"pattern": NAME_PATTERN})]
Step = Annotated[int, msgspec.Meta(ge=0, le=MAX_STEP)]
Rank = Annotated[int, msgspec.Meta(ge=0, lt=MAX_RANKS)]
Ranks = Annotated[int, msgspec.Meta(ge=0, le=MAX_RANKS)]  # a world size or a parallel degree (0: unknown)
GpuIndex = Annotated[int, msgspec.Meta(ge=0, lt=MAX_GPUS)]
EventTime = Annotated[float, msgspec.Meta(gt=0.0, le=MAX_TS)]

"""What an XID code means for the machine: evict it, or blame the application.

The table follows NVIDIA's "XID Errors" catalog
(https://docs.nvidia.com/deploy/xid-errors/, the "Xid catalog" table and its
"Recommended action" column) and the GPU debug guidelines
(https://docs.nvidia.com/deploy/gpu-debug-guidelines/). Codes whose
recommended action is a GPU reset, node drain or hardware inspection are
*fatal*: one occurrence is enough to take the node out. Codes NVIDIA
attributes to the application (a bad kernel, an illegal address, a
preempted context) are *application* codes: they are reported, never
evicted on alone. Codes absent from both sets are *unknown* and are treated
like application codes: a machine is not evicted on a code we cannot name.

>>> classify(79).severity, classify(13).severity, classify(9999).severity
('fatal', 'application', 'unknown')
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import NamedTuple


class XidClass(NamedTuple):
    """How one XID code is handled."""

    code: int
    severity: str  # "fatal" | "application" | "unknown"
    meaning: str


FATAL: dict[int, str] = {
    32: "invalid or corrupted push buffer stream (PCIe/bus corruption)",
    38: "driver firmware error",
    46: "GPU stopped processing (catalog: reset the GPU, then service if it recurs)",
    48: "double-bit ECC error",
    54: "auxiliary power is not connected",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement / row-remap recording event (reset pending)",
    64: "ECC page retirement / row-remap recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (GPU reset required)",
    95: "uncontained ECC error",
    110: "security fault error",
    119: "GSP RPC timeout",
    120: "GSP error",
    121: "C2C link error",
    122: "SPI PMU RPC read failure",
    123: "SPI PMU RPC write failure",
    136: "GPU lost its configured state",
    140: "unrecovered ECC error",
    143: "GPU initialization failure",
    144: "NVLink SAW error",
    145: "NVLink RLW error",
    146: "NVLink TLW error",
    147: "NVLink TREX error",
    148: "NVLink NVLPW control error",
    149: "NVLink NETIR error",
    150: "NVLink MSE error",
    155: "NVLink/C2C link down",
}

APPLICATION: dict[int, str] = {
    13: "graphics engine exception (application fault)",
    31: "GPU memory page fault (usually an application illegal address)",
    43: "GPU stopped processing (application fault)",
    45: "preemptive cleanup after previous errors (process killed)",
    68: "NVDEC/video engine exception",
    69: "graphics engine class error",
    109: "context switch timeout",
}


# XID 154 reports a change of the GPU's recovery action; its text names the action.
RECOVERY_XID = 154
RECOVERY_NONE = ("None", "none")


def classify(code: int, message: str = "") -> XidClass:
    """The class of one XID code (154 is judged by the recovery action its message names)."""
    if code == RECOVERY_XID:
        action = message.rsplit(" to ", 1)[-1]  # "changed from 0x0 (None) to 0x1 (Reset Required)"
        if action and not any(word in action for word in RECOVERY_NONE):
            return XidClass(code, "fatal", f"GPU recovery action required: {message}")
        return XidClass(code, "application", "GPU recovery action changed to none")
    if code in FATAL:
        return XidClass(code, "fatal", FATAL[code])
    if code in APPLICATION:
        return XidClass(code, "application", APPLICATION[code])
    return XidClass(code, "unknown", "not in the fatal or application tables")


def is_fatal(code: int, extra_fatal: AbstractSet[int] = frozenset(), message: str = "") -> bool:
    """Whether one occurrence of `code` justifies taking the GPU out."""
    if code == RECOVERY_XID:
        return classify(code, message).severity == "fatal" or code in extra_fatal
    return code in FATAL or code in extra_fatal

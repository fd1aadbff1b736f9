"""Container HEALTHCHECK: one HTTP GET, exit 0 if it answers 2xx.

Why a script and not curl: the slim base image has no curl, and this keeps
the probe in the interpreter the image already carries. The URL comes from
TRAINGUARD_HEALTH_URL, else the metrics endpoint on TRAINGUARD_METRICS__PORT;
with neither set (replay: no HTTP server) the container is healthy
while its process runs.
"""

from __future__ import annotations

import os
import sys
import urllib.request


def health_url(env: dict[str, str]) -> str:
    """The URL to probe, or "" when the process serves none."""
    port = env.get("TRAINGUARD_METRICS__PORT", "0")
    default = f"http://127.0.0.1:{port}/metrics" if port not in ("", "0") else ""
    return env.get("TRAINGUARD_HEALTH_URL", default)


def main() -> int:
    """Probe once; 0 healthy, 1 unhealthy (Docker's convention)."""
    url = health_url(dict(os.environ))
    if not url:
        return 0
    try:
        with urllib.request.urlopen(url, timeout=4) as response:  # noqa: S310 - a fixed local URL
            return 0 if 200 <= response.status < 300 else 1
    except OSError as exc:
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

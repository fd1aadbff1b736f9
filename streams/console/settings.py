"""The `console:` section of the config: where `trainguard ui` listens and whom it lets in."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class ConsoleSettings(BaseModel):
    """The operator console (`trainguard ui`)."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field("127.0.0.1", description="address to listen on")
    port: int = Field(8765, ge=0, le=65535, description="port to listen on (0: any free port)")
    credentials_file: Path | None = Field(None, description="YAML list of users: name, role (viewer|operator), "
                                          "token_sha256 (or token); used for bearer tokens, basic auth and login")
    trusted_user_header: str = Field("", description="behind an OIDC ingress: the header naming the signed-in "
                                     "user (e.g. X-Forwarded-User); empty: headers are never trusted")
    trusted_groups_header: str = Field("", description="the ingress header listing the user's groups, comma-separated")
    operator_groups: list[str] = Field(default_factory=lambda: ["trainguard-operators"],
                                       description="groups whose members may act (others only view)")
    secure_cookies: bool = Field(False, description="mark cookies Secure (set when served over HTTPS)")
    public_origin: str = Field("", description="the console's origin as browsers see it (scheme://host[:port]), "
                               "e.g. behind a TLS ingress; empty: this server's own scheme, host and port")
    max_streams_per_user: int = Field(4, ge=1, description="live event streams (/api/events) one principal may "
                                      "hold open at once; more get 429")
    max_json_depth: int = Field(16, ge=1, description="request bodies nested deeper than this get 400")
    suspect_s: float = Field(900.0, gt=0, description="a node named by an incident this recently is 'suspect'")

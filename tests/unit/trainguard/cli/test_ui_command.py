"""`trainguard ui` refuses to start, in one line with exit code 2, when nobody could log in or charts are missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.streams.console.app import AssetsMissing, check_assets


def test_no_way_to_log_in(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ui", "--port", "0", "--timeout", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("trainguard ui: no way to log in") and "\n" not in err


def test_bad_credentials_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    users = tmp_path / "users.yaml"
    users.write_text("users:\n  - {name: a, role: root, token: t}\n")
    assert main(["ui", "--credentials", str(users)]) == 2
    err = capsys.readouterr().err.strip()
    assert str(users) in err and "\n" not in err


def test_missing_chart_library_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(AssetsMissing, match="make install"):
        check_assets(tmp_path)
    check_assets()  # the real static folder: `make install` fetched uPlot

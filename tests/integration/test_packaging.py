"""The wheel installs one package, `rota`, with the layer folders as its subpackages."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_domain_fails_only_rota_domain_exists() -> None:
    with pytest.raises(ImportError):
        importlib.import_module("domain")
    assert importlib.import_module("rota.domain").__name__ == "rota.domain"


@pytest.mark.slow
def test_wheel_contains_only_the_rota_package(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".venv", "build", "*.egg-info", ".git", "__pycache__", "*.db*"
        ),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
    )
    (wheel,) = (tmp_path / "dist").glob("rota-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    outside = [n for n in names if not n.startswith(("rota/", "rota-0.1.0.dist-info/"))]
    assert outside == []
    for layer in ("domain", "projections", "infrastructure", "replay"):
        assert f"rota/{layer}/__init__.py" in names
    assert "rota/py.typed" in names
    assert "rota/domain/events/__init__.py" in names
    # Every module of every layer folder is in the wheel.
    for folder, package in (
        ("domain", "rota/domain"),
        ("infrastructure", "rota/infrastructure"),
        ("replay", "rota/replay"),
        ("projections", "rota/projections"),
        ("rota", "rota"),
    ):
        for module in (ROOT / folder).rglob("*.py"):
            relative = module.relative_to(ROOT / folder).as_posix()
            assert f"{package}/{relative}" in names, relative
    # The web view's templates and stylesheet are package data.
    for data in (
        *(ROOT / "rota/http/web/templates").glob("*.html"),
        ROOT / "rota/http/web/static/web.css",
    ):
        assert data.relative_to(ROOT).as_posix() in names, data.name
    entry_points = zipfile.ZipFile(wheel).read("rota-0.1.0.dist-info/entry_points.txt").decode()
    assert "rota = rota.__main__:main" in entry_points

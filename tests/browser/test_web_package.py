"""The web view's templates and stylesheet are found through the installed package (the
strict editable install links only what setup.py's package data names), and every
template compiles."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from rota.http.web.render import ENV

ROOT = Path(__file__).resolve().parents[2]


def test_every_template_and_the_stylesheet_are_installed() -> None:
    package = resources.files("rota.http.web")
    sources = sorted(p.name for p in (ROOT / "rota/http/web/templates").glob("*.html"))
    assert "base.html" in sources
    for name in sources:
        assert package.joinpath("templates", name).is_file(), name
        ENV.get_template(name)  # compiles
    assert package.joinpath("static", "web.css").read_text().startswith("/* rota's web view")

"""Packaging: maps the five layer folders at the repository root into the `rota` package.

`domain/` installs as `rota.domain`, `projections/` as `rota.projections`, and so on, so
embedding rota never puts a top-level `domain` package into someone's site-packages. The
package list is computed, so a new subpackage can never be left out of the wheel.
"""

from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).parent
LAYERS = {
    "rota": "rota",
    "rota.domain": "domain",
    "rota.projections": "projections",
    "rota.application": "application",
    "rota.infrastructure": "infrastructure",
    "rota.replay": "replay",
}


def _packages() -> tuple[list[str], dict[str, str]]:
    packages: list[str] = []
    package_dir: dict[str, str] = {}
    for package, folder in LAYERS.items():
        package_dir[package] = folder
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            relative = init.parent.relative_to(ROOT / folder)
            parts = [] if str(relative) == "." else list(relative.parts)
            packages.append(".".join([package, *parts]))
    return packages, package_dir


PACKAGES, PACKAGE_DIR = _packages()

setup(
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    # The PostgreSQL log's DDL is a .sql file beside the store that runs it.
    package_data={
        "rota": ["py.typed"],
        "rota.infrastructure.postgres": ["*.sql"],
        # The web view's templates and stylesheet.
        "rota.http.web": ["templates/*.html", "static/*.css"],
    },
    include_package_data=False,
)

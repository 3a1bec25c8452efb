"""Packaging: maps the five layer folders at the repository root into the `rota` package.

`domain/` installs as `rota.domain`, `projections/` as `rota.projections`, and so on, so
embedding rota never puts a top-level `domain` package into someone's site-packages. The
package list is computed, so a new subpackage can never be left out of the wheel.

The shell executor's wrapper (`infrastructure/executors/wrapper.c`) is compiled here, when the
package is built or installed (`build_wrapper`, a step of `build`, normal and editable
installs alike), into `rota/infrastructure/executors/rota-wrapper`: linked statically if it
links, else dynamically. With no C compiler, or if the build fails, the install goes on
without it (a warning says so) and the shell executor forks its Python wrapper instead:
the same guarantees, a little more CPU a run. Nothing is ever compiled at run time.
"""

import os
import sys
from pathlib import Path

from setuptools import Command, Distribution, setup
from setuptools.command.build import build

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
WRAPPER_SOURCE = Path("infrastructure", "executors", "wrapper.c")
WRAPPER = Path("rota", "infrastructure", "executors", "rota-wrapper")  # in the built tree


class BuildWrapper(Command):
    """Compile the shell wrapper into the built package (no compiler: warn, install on)."""

    description = "compile the shell executor's C wrapper (optional)"
    user_options: list[tuple[str, str | None, str]] = []
    editable_mode = False  # set by editable installs: the output still goes to build_lib,
    # which the strict editable install copies into its link tree (get_outputs)

    def initialize_options(self) -> None:
        self.build_lib: str | None = None
        self.build_temp: str | None = None

    def finalize_options(self) -> None:
        self.set_undefined_options("build", ("build_lib", "build_lib"))
        self.set_undefined_options("build", ("build_temp", "build_temp"))

    def _target(self) -> Path:
        assert self.build_lib is not None
        return Path(self.build_lib, WRAPPER)

    def get_outputs(self) -> list[str]:
        target = self._target()
        return [str(target)] if target.is_file() else []

    def get_output_mapping(self) -> dict[str, str]:
        return {}  # built, not a source file: copied, never linked, by an editable install

    def get_source_files(self) -> list[str]:
        return [str(WRAPPER_SOURCE)]

    def run(self) -> None:
        target = self._target()
        if target.exists():
            target.unlink()  # a stale program from an earlier build is never shipped
        try:
            self._compile(target)
        except Exception as error:  # no compiler, a failed compile or link
            message = (
                f"warning: rota: the shell wrapper was not compiled ({error}); installing "
                "without it: shell jobs then start through a fork of the Python spawner "
                "(the same guarantees, more CPU a run). A C compiler at install time "
                "makes shell launches cheaper."
            )
            print(message, file=sys.stderr)

    def _compile(self, target: Path) -> None:
        from distutils.ccompiler import new_compiler
        from distutils.errors import CCompilerError, DistutilsError
        from distutils.sysconfig import customize_compiler

        assert self.build_temp is not None
        compiler = new_compiler(verbose=self.verbose, dry_run=self.dry_run)
        customize_compiler(compiler)
        objects = compiler.compile(
            [str(WRAPPER_SOURCE)], output_dir=self.build_temp, extra_postargs=["-O2"]
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        error: Exception | None = None
        for static in (["-static"], []):  # static: no dynamic loading per run, if it links
            try:
                compiler.link_executable(
                    objects, target.name, output_dir=str(target.parent), extra_preargs=static
                )
            except (CCompilerError, DistutilsError) as failed:
                error = failed
                continue
            os.chmod(target, 0o755)
            return
        raise RuntimeError(f"linking failed: {error}")


class Build(build):
    """`build` with the wrapper's step after the others (a copy: setuptools' list unchanged)."""

    sub_commands = [*build.sub_commands, ("build_wrapper", None)]


class PlatformDistribution(Distribution):
    """A wheel holding a compiled program is tagged for its platform, never `py3-none-any`."""

    def has_ext_modules(self) -> bool:
        return True


setup(
    distclass=PlatformDistribution,
    cmdclass={"build": Build, "build_wrapper": BuildWrapper},
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    # The PostgreSQL log's DDL is a .sql file beside the store that runs it.
    package_data={
        "rota": ["py.typed"],
        "rota.infrastructure.postgres": ["*.sql"],
        # The shell wrapper's source (compiled by build_wrapper beside it, if it can be).
        "rota.infrastructure.executors": ["wrapper.c"],
        # The web view's templates and stylesheet.
        "rota.http.web": ["templates/*.html", "static/*.css"],
    },
    include_package_data=False,
)

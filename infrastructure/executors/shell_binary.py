"""Optimisation: each shell run's wrapper is the C program installed with the package,
posix_spawned by the spawner, instead of a fork of the spawner running its Python `child`:
about 0.3 ms less CPU a shell job (bench shell).

The program is `wrapper.c` beside this module, compiled when the package is built or
installed (setup.py's `build_wrapper` step) into `rota-wrapper` beside this module; nothing
is ever compiled at run time. It does what `child` in `shell_spawner` does, in the same
order, with the same files, messages and exit codes (see the source's header). A fork of the
Python spawner costs its copy-on-write page faults (the child re-faults the interpreter's
text and copies what it writes: ~210 faults a run); an exec'd static program of 0.8 MB
faults ~85 pages and copies none of the spawner's memory.

`installed_wrapper` answers its path only if it is an executable regular file (not a
symbolic link) owned by root or by this user and writable by no one else, in a directory
owned by root or this user and writable by no one else (the package's own, wherever the
environment lives: a program the install put there, never one built at run time);
otherwise None, and the spawner forks `child` as it does on a machine where
no compiler was there at install time. Every guarantee is the same either way; only the
cost differs. `SPAWN_NATIVE` is the spawner's code (part of its `SPAWNER` text) that starts
it: the run's five descriptors as 0-4, in a session of its own (setsid), SIGHUP, SIGINT and
SIGTERM blocked, every other signal the spawner changed at its default; any failure to
start it falls back to the fork.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

NAME = "rota-wrapper"
HERE = Path(__file__).parent  # not resolved: an editable install's link tree holds it


def _safe(info: os.stat_result) -> bool:
    """Owned by root or by us, and writable by no one else."""
    return info.st_uid in (0, os.getuid()) and not info.st_mode & 0o022


def trusted(program: Path) -> bool:
    """Whether `program` is safe to run: see the module docstring (its place aside)."""
    try:
        info = program.lstat()  # the file itself, never what a link points to
        folder = program.parent.stat()
    except OSError:
        return False
    return (
        stat.S_ISREG(info.st_mode)
        and _safe(info)
        and stat.S_ISDIR(folder.st_mode)
        and _safe(folder)
        and os.access(program, os.X_OK)
    )


def installed_wrapper() -> str | None:
    """The installed wrapper's path, or None if there is none fit to run (fork instead)."""
    program = HERE / NAME
    if not trusted(program):
        return None
    return str(program)


SPAWN_NATIVE = r"""
def spawn_native(body, fds):
    # The installed wrapper, started without a fork: its pid, or None (fork `child`).
    copies = []  # a received fd numbered 0-4 could be overwritten by another's dup2
    try:
        run, hold, argv, env, cwd = marshal.loads(body)
        sources = []
        for fd in fds:
            if fd <= 4:
                fd = fcntl(fd, F_DUPFD_CLOEXEC, 5)
                copies.append(fd)
            sources.append(fd)  # received close-on-exec: only their copies as 0-4 pass
        actions = [(POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(sources)]
        argv = [NATIVE, run, repr(float(hold)), cwd or ""] + argv
        return posix_spawn(NATIVE, argv, env, file_actions=actions, setsid=True,
                           setsigmask=HELD, setsigdef=DEFAULTS)
    except Exception:
        return None
    finally:
        for fd in copies:
            close(fd)
"""

"""The native wrapper: the protocol of the spawner's `child` (see `shell_spawner`) as a tiny C
program, built once per machine and user with the C compiler when one is there.

A Python wrapper forked by the spawner costs ~1.2 ms of CPU per run, mostly copy-on-write
page faults as the forked interpreter runs (and the fork's own page-table copy in the
spawner); this program, started by the spawner with posix_spawn (no copy of the spawner's
memory) costs ~0.35 ms. It does exactly what `child` does, in the same order, with the same
files, messages and exit codes:

    rota-wrapper RUN HOLD_SECONDS CWD PROGRAM [ARG...]    (CWD "" for none)

with the run's stdin, stdout and stderr as 0, 1 and 2, the report channel's write end as 3 and
the wake pipe's read end as 4, started by the spawner in a session of its own, with SIGHUP,
SIGINT and SIGTERM blocked; it ignores SIGPIPE and SIGXFSZ itself, as the forked Python
wrapper does (a report to a launcher that died must not kill it before it writes `status`),
and the command gets every signal at its default; its environment is the command's
(posix_spawnp searches its PATH, as `child` does by setting its own).

Where it is built: `<tempdir>/rota-wrapper-<uid>/wrapper-<digest of the source>`, a
directory of this user (0700, writable by no one else), compiled to a temporary name and
renamed into place, so concurrent builders and readers never see half a file; linked
statically where the C library allows (no dynamic loading per run, and the job's LD_*
variables, which are the wrapper's environment too, do not reach it). With no
compiler, or if the build fails, `native_wrapper` answers None and the spawner forks the
Python wrapper as before: every guarantee is the same either way, only the cost differs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from pathlib import Path

SOURCE = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
enum { REPORT = 3, WAKE = 4 };

static void say(const char *message) {
    ssize_t ignored = write(REPORT, message, strlen(message));
    (void)ignored;
}

static void say_errno(const char *prefix, int error) {
    char text[32];
    snprintf(text, sizeof text, "%s%d", prefix, error);
    say(text);
}

/* Field 22 of /proc/self/stat (its start time, which tells a reused pid apart); -1: unknown. */
static long long start_time(void) {
    char raw[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t length = read(fd, raw, sizeof raw - 1);
    close(fd);
    if (length <= 0)
        return -1;
    raw[length] = '\0';
    char *field = strrchr(raw, ')');
    for (int i = 0; field != NULL && i < 20; i++)
        field = strchr(field + 1, ' ');
    return field == NULL ? -1 : strtoll(field + 1, NULL, 10);
}

/* b"h<pid> <start time>" with a pidfd of itself (SCM_RIGHTS) where the report channel is a
   socket and the kernel has pidfd_open; else the same text alone. */
static void say_held(void) {
    char text[64];
    int length = snprintf(text, sizeof text, "h%d %lld", (int)getpid(), start_time());
    int pidfd = -1;
#ifdef SYS_pidfd_open
    pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
#endif
    if (pidfd >= 0) {
        struct iovec part = {.iov_base = text, .iov_len = (size_t)length};
        union {
            char buffer[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } control;
        memset(&control, 0, sizeof control);
        struct msghdr message = {.msg_iov = &part, .msg_iovlen = 1,
                                 .msg_control = control.buffer,
                                 .msg_controllen = sizeof control.buffer};
        struct cmsghdr *header = CMSG_FIRSTHDR(&message);
        header->cmsg_level = SOL_SOCKET;
        header->cmsg_type = SCM_RIGHTS;
        header->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(header), &pidfd, sizeof(int));
        ssize_t sent = sendmsg(REPORT, &message, MSG_NOSIGNAL);
        close(pidfd);
        if (sent == length)
            return;
    }
    say(text);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int path(char *out, size_t size, const char *run, const char *name) {
    return snprintf(out, size, "%s/%s", run, name) < (int)size;
}

static int write_status(const char *run, int code) {
    char temporary[4096], final[4096], text[32];
    if (!path(temporary, sizeof temporary, run, "status.tmp")
        || !path(final, sizeof final, run, "status"))
        return -1;
    int fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    int length = snprintf(text, sizeof text, "%d\n", code);
    ssize_t written = write(fd, text, length);
    close(fd);
    if (written != length)
        return -1;
    return rename(temporary, final);
}

int main(int argc, char **argv) {
    if (argc < 5)
        return 127;
    const char *run = argv[1], *cwd = argv[3];
    double hold = strtod(argv[2], NULL);
    pid_t launcher = getppid();
    /* Ignored, as the Python wrapper has them: saying b"ok" to a launcher that died since
       `go` (EPIPE) must not kill it before it records `status`. The command gets both at
       their default (below). */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);
    char go[4096], abandoned[4096];
    if (!path(go, sizeof go, run, "go") || !path(abandoned, sizeof abandoned, run, "abandoned"))
        return 127;
    if (fcntl(REPORT, F_SETFD, FD_CLOEXEC) < 0 || fcntl(WAKE, F_SETFD, FD_CLOEXEC) < 0)
        return 127;  /* not the command's */
    int lock = open(run, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock < 0 || flock(lock, LOCK_EX) < 0)
        return 127;
    if (cwd[0] != '\0' && chdir(cwd) < 0) {
        say_errno("e", errno);
        return 127;
    }
    say_held();
    int waking = 1;
    double until = now() + hold;
    while (access(go, F_OK) != 0) {
        if (!waking || getppid() != launcher || now() >= until) {
            int fd = open(abandoned, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
            if (fd >= 0)
                close(fd);
            return 125;
        }
        struct pollfd wake = {.fd = WAKE, .events = POLLIN};
        if (poll(&wake, 1, 21) > 0) {
            char bytes[64];
            if (read(WAKE, bytes, sizeof bytes) == 0)
                waking = 0;
        }
    }
    close(WAKE);
    posix_spawnattr_t attributes;
    sigset_t defaults, none;
    sigemptyset(&none);
    sigemptyset(&defaults);
    int numbers[] = {SIGPIPE, SIGXFSZ, SIGCHLD, SIGHUP, SIGINT, SIGTERM};
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++)
        sigaddset(&defaults, numbers[i]);
    if (posix_spawnattr_init(&attributes) != 0
        || posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK)
        || posix_spawnattr_setsigdefault(&attributes, &defaults)
        || posix_spawnattr_setsigmask(&attributes, &none))
        return 127;
    pid_t pid;
    int error = posix_spawnp(&pid, argv[4], NULL, &attributes, argv + 4, environ);
    if (error != 0) {
        say_errno("", error);
        return 127;
    }
    say("ok");
    close(REPORT);
    int raw;
    while (waitpid(pid, &raw, 0) < 0)
        if (errno != EINTR)
            return 127;
    int code = WIFSIGNALED(raw) ? -WTERMSIG(raw) : WEXITSTATUS(raw);
    if (write_status(run, code) != 0)
        return 127;
    return code >= 0 ? code : 128 - code;
}
"""

DIGEST = hashlib.sha256(SOURCE.encode()).hexdigest()[:16]
BUILD_SECONDS = 120.0

_lock = threading.Lock()
_built: dict[str, str | None] = {}  # directory -> the program (None: it cannot be built)


def wrapper_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"rota-wrapper-{os.getuid()}"


def native_wrapper(directory: Path | None = None) -> str | None:
    """The native wrapper's path, built on the first call if missing; None if it cannot be
    (no compiler, a failed build, or a directory not safely ours)."""
    directory = directory or wrapper_dir()
    key = str(directory)
    with _lock:
        if key not in _built:
            _built[key] = _build(directory)
        return _built[key]


def _ours(info: os.stat_result) -> bool:
    return info.st_uid == os.getuid() and not info.st_mode & 0o022


def _build(directory: Path) -> str | None:
    program = directory / f"wrapper-{DIGEST}"
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
        info = directory.lstat()
        if not stat.S_ISDIR(info.st_mode) or not _ours(info):
            return None  # someone else's: never run what it holds
        with contextlib.suppress(FileNotFoundError):
            info = program.lstat()
            if stat.S_ISREG(info.st_mode) and _ours(info) and info.st_mode & 0o100:
                return str(program)
            return None
    except OSError:
        return None
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    fd, source = tempfile.mkstemp(suffix=".c", dir=directory)
    built = f"{source[:-2]}.out"
    try:
        with os.fdopen(fd, "w") as file:
            file.write(SOURCE)
        for static in (["-static"], []):  # static: no dynamic loading per run, if it links
            command = [compiler, "-O2", *static, "-o", built, source]
            try:
                done = subprocess.run(
                    command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, timeout=BUILD_SECONDS, check=False,
                )  # fmt: skip
            except (OSError, subprocess.TimeoutExpired):
                return None
            if done.returncode == 0:
                os.chmod(built, 0o700)
                os.replace(built, program)
                return str(program)
        return None
    except OSError:
        return None
    finally:
        for leftover in (source, built):
            with contextlib.suppress(OSError):
                os.unlink(leftover)

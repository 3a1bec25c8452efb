"""The spawner: one small, long-lived, single-threaded process (a "zygote") that starts every
shell run's wrapper. Nothing is compiled at run time and nothing is executed from a temporary
directory: the spawner is the Python interpreter running `SPAWNER` below, and each wrapper is
the C program installed with the package (`shell_binary`: posix_spawned, where the install
could build it) or else a fork of the spawner that runs `child` (Python); either posix_spawns
only the job's own command.

Optimisation: a fork of a small process per run instead of a new interpreter per run
(bench.shell; bench/RESULTS.md, "2026-12-07, shell: nothing compiled at run time").
Starting `python` per run costs ~7 ms of CPU, more than the job (`true`: ~0.8 ms); a fork of
the scheduler itself would be cheap but is unsafe (it is multi-threaded: a lock held by
another thread at the fork stays held in the child). So a ShellExecutor starts, on its first
launch, one spawner (`python -I -S -c SPAWNER`: no site, and only built-in or C modules, no
`os`, `socket`, `json` or `signal` Python modules, so it stays a few MB and the fork copies
little) in a session of its own, connected by a unix SOCK_SEQPACKET socket pair. Before it
serves, it runs what a wrapper runs once on a socket pair of its own (`warm`), so that the
attribute caches and lazily bound symbols a wrapper touches are already its own and each
fork's child writes (copies) fewer pages. Per launch the scheduler sends the request (run
directory, hold seconds, argv, environment, cwd: `marshal`, in memory only; its size and
first 32 KiB in one message) with the run's stdin, stdout, stderr, the report channel's write
end (a SOCK_SEQPACKET socket pair of the run's own) and the wake pipe's read end
(SCM_RIGHTS, received close-on-exec); the spawner starts the wrapper (posix_spawns the
installed one, else forks) and closes its copies.
It answers nothing: the wrapper reports to the launcher itself, on the report channel, so no
launch waits for a round trip through the spawner behind another's (one round trip at a
time, each waiting for the GIL in a busy scheduler, was the limit of a daemon's shell
launches: ~3.8 ms each). A spawner that cannot start the wrapper says b"e" and the errno on
the run's report channel. It reaps its children (SIGCHLD through a wakeup pipe: no timer)
and exits when the scheduler's end of the socket closes, so a wrapper holding its command
back sees its parent change and gives up. A spawner that died is started again on the next
launch.

The wrapper (`child`) is the protocol of `shell_wrapper`: in a session of its own (setsid),
with SIGHUP, SIGINT and SIGTERM blocked and SIGPIPE and SIGXFSZ ignored (a report to a
launcher that died must not kill it before it writes `status`), it takes an flock on the run
directory (held while it lives: evidence any pid namespace can read), says b"h<pid> <start
time>" on the report channel (the start time is field 22 of /proc/self/stat, -1 if unknown),
with a pidfd of itself (SCM_RIGHTS; opened by the wrapper for itself, so it cannot name a
reused pid; without one where the kernel has no pidfd_open or the channel is a pipe), and
holds the command back until the file `go` appears (the launcher creates it once the launch
is pinned, then writes to the wake pipe, which wakes the wrapper at once). If its parent
changes (the scheduler and so the spawner died), the wake pipe reaches its end, or `hold`
seconds pass, it creates `abandoned` and exits 125 having started nothing; it looks for `go`
every 250 ms at most (its launcher's death ends the wake pipe at once: the parent pid is the
fallback). Let go, it posix_spawns the command (argv, cwd, environment and
standard streams as given, PATH searched as the command's environment says; every signal at
its default, none blocked), says b"ok" or the errno, waits, and writes the exit code (-N:
signal N) to `status` atomically; it exits with that code (128 + N for signal N). It blocks
SIGHUP, SIGINT and SIGTERM, which the command gets at their default, so that it outlives a
command they stop.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time

from rota.application.errors import ExecutorError
from rota.infrastructure.executors.shell_binary import SPAWN_NATIVE, installed_wrapper

CHUNK = 32 * 1024  # request bytes per message (SOCK_SEQPACKET keeps each whole); the first
# message also holds the request's size and its file descriptors

SPAWNER = r"""
import marshal, sys
from _signal import (SIG_BLOCK, SIG_DFL, SIG_IGN, SIGCHLD, SIGHUP, SIGINT, SIGPIPE, SIGTERM,
                     SIGXFSZ, pthread_sigmask, set_wakeup_fd, signal)
from _socket import (AF_UNIX, CMSG_SPACE, MSG_CMSG_CLOEXEC, MSG_NOSIGNAL, SCM_RIGHTS,
                     SOCK_SEQPACKET, SOL_SOCKET, socket, socketpair)
from fcntl import F_DUPFD_CLOEXEC, LOCK_EX, LOCK_UN, fcntl, flock
from posix import (F_OK, O_CLOEXEC, O_CREAT, O_DIRECTORY, O_RDONLY, O_TRUNC, O_WRONLY,
                   POSIX_SPAWN_DUP2, WNOHANG, _exit, access, chdir, close, dup2, fork, getpid,
                   getppid, pidfd_open, pipe, posix_spawn, posix_spawnp, putenv, read, rename,
                   set_blocking, set_inheritable, setsid, unsetenv, waitpid,
                   waitstatus_to_exitcode, write)
from posix import open as open_fd
from select import POLLIN, poll
from time import monotonic
HELD = (SIGHUP, SIGINT, SIGTERM)
DEFAULTS = (SIGPIPE, SIGXFSZ, SIGCHLD) + HELD
CREATE = O_WRONLY | O_CREAT | O_CLOEXEC
ORDER = sys.byteorder

def say(report, message):
    try:
        write(report, message)
    except OSError:
        pass

def started(pid):
    # Field 22 of /proc/PID/stat (-1: unknown).
    try:
        fd = open_fd("/proc/%d/stat" % pid, O_RDONLY | O_CLOEXEC)
        try:
            raw = read(fd, 1024)
        finally:
            close(fd)
        return int(raw[raw.rindex(b")") + 2 :].split(None, 20)[19])
    except (OSError, ValueError, IndexError):
        return -1

def say_held(report):
    # b"h<pid> <start time>", with a pidfd of itself where the channel is a socket
    pid = getpid()
    text = b"h%d %d" % (pid, started(pid))
    try:
        pidfd = pidfd_open(pid)
    except OSError:
        return say(report, text)
    try:
        sock = socket(AF_UNIX, SOCK_SEQPACKET, 0, report)
    except OSError:  # not a socket (a pipe): the text alone
        close(pidfd)
        return say(report, text)
    try:
        sock.sendmsg([text], [(SOL_SOCKET, SCM_RIGHTS, pidfd.to_bytes(4, ORDER))], MSG_NOSIGNAL)
    except OSError:
        say(report, text)
    finally:
        sock.detach()
        close(pidfd)

def child(run, report, wake, launcher, hold, argv, env, cwd):
    try:
        setsid()
        pthread_sigmask(SIG_BLOCK, HELD)
        flock(open_fd(run, O_RDONLY | O_DIRECTORY | O_CLOEXEC), LOCK_EX)
        if cwd is not None:
            try:
                chdir(cwd)
            except OSError as error:
                say(report, b"e%d" % (error.errno or 0))
                return 127
        say_held(report)
        go, waking, until = run + "/go", True, monotonic() + hold
        poller = poll()
        poller.register(wake, POLLIN)
        while not access(go, F_OK):
            if not waking or getppid() != launcher or monotonic() >= until:
                close(open_fd(run + "/abandoned", CREATE, 0o600))
                return 125
            look = max(0, min(250, int((until - monotonic()) * 1000) + 1))
            if poller.poll(look) and not read(wake, 64):
                waking = False
        close(wake)
        if "PATH" in env:
            putenv("PATH", env["PATH"])  # posix_spawnp searches our own PATH
        else:
            unsetenv("PATH")
        try:
            pid = posix_spawnp(argv[0], argv, env, setsigdef=DEFAULTS, setsigmask=())
        except OSError as error:
            say(report, b"%d" % (error.errno or 0))
            return 127
        say(report, b"ok")
        close(report)
        code = waitstatus_to_exitcode(waitpid(pid, 0)[1])
        fd = open_fd(run + "/status.tmp", CREATE | O_TRUNC, 0o600)
        write(fd, b"%d\n" % code)
        close(fd)
        rename(run + "/status.tmp", run + "/status")
        return code if code >= 0 else 128 - code
    except BaseException:
        return 127

def reap():
    while True:
        try:
            pid, _ = waitpid(-1, WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return

def received(ancdata):
    fds = []
    for level, kind, data in ancdata:
        if level == SOL_SOCKET and kind == SCM_RIGHTS:
            for offset in range(0, len(data) - len(data) % 4, 4):
                fds.append(int.from_bytes(data[offset : offset + 4], ORDER, signed=True))
    return fds

def warm():
    # Run what a wrapper runs once here (no command started), so that the lookups it
    # caches and the symbols it binds lazily are this process's before it forks any
    # wrapper (each call below fails or changes nothing).
    ours, theirs = socketpair(AF_UNIX, SOCK_SEQPACKET)
    try:
        say_held(theirs.fileno())
        poller = poll()
        poller.register(ours.fileno(), POLLIN)
        if poller.poll(0):
            for fd in received(ours.recvmsg(64, CMSG_SPACE(4), MSG_CMSG_CLOEXEC)[1]):
                close(fd)
        access("/", F_OK)
        dup2(ours.fileno(), ours.fileno())
        pthread_sigmask(SIG_BLOCK, ())
        flock(ours.fileno(), LOCK_UN)
        getppid()
        waitstatus_to_exitcode(0)
        reap()
        putenv("ROTA_SPAWNER_WARM", "1")
        unsetenv("ROTA_SPAWNER_WARM")
        for call in (setsid, lambda: chdir(""), lambda: rename("", ""), spawn_nothing):
            try:
                call()
            except (OSError, TypeError):
                pass
    finally:
        ours.close()
        theirs.close()

# SPAWN_NATIVE
def spawn_nothing():
    # posix_spawnp's attribute calls, refused (TypeError) before anything is started
    posix_spawnp("true", ["true"], {}, setsigdef=DEFAULTS, setsigmask=(), scheduler=(0, None))

def woke(*_):
    pass  # SIGCHLD: the wakeup fd wakes the loop (kept here: a wrapper's reset frees nothing)

def serve(sock):
    set_inheritable(sock.fileno(), False)
    woken, waker = pipe()
    set_blocking(waker, False)
    set_wakeup_fd(waker)
    signal(SIGCHLD, woke)
    for number in (SIGHUP, SIGINT):
        signal(number, SIG_IGN)
    poller = poll()  # not select(): the scheduler may hand it an fd above 1023
    poller.register(sock.fileno(), POLLIN)
    poller.register(woken, POLLIN)
    space = CMSG_SPACE(5 * 4)
    warm()
    while True:
        try:
            events = poller.poll()
        except InterruptedError:
            continue
        asked = False
        for fd, _ in events:  # no comprehension: it would be a new function object a run
            if fd == woken:
                read(woken, 4096)
                reap()
            else:
                asked = True
        if not asked:
            continue
        first, ancdata, _, _ = sock.recvmsg(8 + CHUNK, space, MSG_CMSG_CLOEXEC)
        fds = received(ancdata)
        if len(first) < 8:
            return  # the scheduler is gone
        size = int.from_bytes(first[:8], "big")
        body = first[8:]
        while len(body) < size:
            part = sock.recv(65536)
            if not part:
                return
            body += part
        pid = -1
        if len(fds) == 5:
            try:
                pid = (spawn_native(body, fds) if NATIVE else None) or fork()
            except OSError as error:  # nothing started: say why on the run's report channel
                say(fds[3], b"e%d" % (error.errno or 0))
        if pid == 0:
            code = 127
            try:
                set_wakeup_fd(-1)
                signal(SIGCHLD, SIG_DFL)
                sock.close()
                close(woken)
                close(waker)
                stdin, stdout, stderr, report, wake = fds
                try:  # decoded here: the spawner's own pages, shared with every live
                    # wrapper, are written (copied) as little as possible per run
                    run, hold, argv, env, cwd = marshal.loads(body)
                except Exception:
                    say(report, b"e0")
                    raise
                dup2(stdin, 0)
                dup2(stdout, 1)
                dup2(stderr, 2)
                for fd in (stdin, stdout, stderr):
                    if fd > 2:
                        close(fd)
                code = child(run, report, wake, getppid(), hold, argv, env, cwd)
            finally:
                _exit(code)
        for fd in fds:  # the wrapper reports to the scheduler itself: no answer here
            close(fd)

CHUNK = int(sys.argv[2])
NATIVE = sys.argv[3] if len(sys.argv) > 3 else ""  # the installed wrapper ("": none)
serve(socket(AF_UNIX, SOCK_SEQPACKET, 0, int(sys.argv[1])))
""".replace("\n# SPAWN_NATIVE\n", SPAWN_NATIVE)


class Child:
    """A wrapper as the scheduler sees it: not its child (the spawner's), watched through a
    pidfd (or, where there is none, by signalling its pid)."""

    def __init__(self, pid: int, pidfd: int | None, started: int | None = None) -> None:
        self.pid = pid
        self.started = started  # its start time (field 22 of /proc/PID/stat), if known
        self.returncode: int | None = None  # 0 once it exited: its `status` says how
        self._pidfd = pidfd
        self._fd_lock = threading.Lock()

    def watch_fd(self) -> int | None:
        """A copy of its pidfd (readable once it exited) for the caller to close; None if
        there is none or it was closed."""
        with self._fd_lock:
            return None if self._pidfd is None else os.dup(self._pidfd)

    def poll(self) -> int | None:
        if self.returncode is None and self._exited():
            self.returncode = 0
            self.close()
        return self.returncode

    def _exited(self) -> bool:
        if self._pidfd is not None:
            return readable(self._pidfd, 0)
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    def wait(self, timeout: float | None = None) -> int:
        """Wait for it to exit (`subprocess.TimeoutExpired` after `timeout` seconds)."""
        until = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            remaining = None if until is None else until - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            pidfd = self._pidfd
            if pidfd is not None:
                readable(pidfd, remaining)
            else:
                time.sleep(0.01 if remaining is None else min(0.01, remaining))
        assert self.returncode is not None
        return self.returncode

    def close(self) -> None:
        with self._fd_lock:
            pidfd, self._pidfd = self._pidfd, None
            if pidfd is not None:
                with contextlib.suppress(OSError):
                    os.close(pidfd)

    def __del__(self) -> None:
        self.close()


def readable(fd: int, timeout: float | None) -> bool:
    """Whether `fd` becomes readable (or hung up) within `timeout` seconds (poll(2): any fd
    number, unlike select's 1024)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout is None else max(0, int(timeout * 1000) + 1)))


class Spawner:
    """The scheduler's end of the spawner (see the module docstring); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> socket.socket:
        if not sys.executable:
            raise ExecutorError("no Python interpreter to run the shell spawner")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", SPAWNER, str(theirs.fileno()), str(CHUNK),
                 installed_wrapper() or ""],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        except OSError as error:
            ours.close()
            raise ExecutorError(f"could not start the shell spawner: {error}") from None
        finally:
            theirs.close()
        self._sock = ours
        return ours

    def spawn(
        self,
        run: str,
        fds: tuple[int, int, int, int, int],
        hold: float,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
    ) -> None:
        """Have the spawner start a wrapper for `run`; `fds` are its stdin, stdout, stderr,
        the report channel's write end and the wake pipe's read end (left open here: the
        caller closes them). Returns once the request is sent: the wrapper reports on the
        report channel itself (its pid, start time and a pidfd with b"h"), and a spawner
        that could not start it says b"e" and an errno there; nothing waits for the
        spawner, so launches from many threads never queue behind each other's round trip."""
        # version 0: no string marked interned, which the wrapper would intern (a write
        # to the interpreter's interned table: pages copied in every wrapper)
        body = marshal.dumps((run, float(hold), argv, env, cwd), 0)
        first = struct.pack("!Q", len(body)) + body[:CHUNK]  # with the fds: one message
        with self._lock:
            for attempt in (1, 2):
                sock = self._sock or self._start()
                try:
                    socket.send_fds(sock, [first], list(fds))
                except OSError:
                    self._stop()  # it died since the last launch: start another, once
                    if attempt == 2:
                        raise ExecutorError("the shell spawner is not running") from None
                    continue
                try:
                    for offset in range(CHUNK, len(body), CHUNK):
                        sock.sendall(body[offset : offset + CHUNK])
                except OSError:
                    self._stop()  # half a request: this spawner is of no more use
                    raise ExecutorError("the shell spawner stopped reading") from None
                return

    def _stop(self) -> None:
        sock, self._sock = self._sock, None
        proc, self._proc = self._proc, None
        if sock is not None:
            sock.close()
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5.0)

    def close(self) -> None:
        """End the spawner (the wrappers it forked run on, in sessions of their own)."""
        with self._lock:
            self._stop()

"""The spawner: one small single-threaded helper process that starts every shell run's wrapper.

Starting an interpreter per job cost more than the job (`true`: ~10 ms of child CPU); a fork
of the scheduler itself would be cheap but is unsafe (it is multi-threaded: a lock held by
another thread at the fork stays held in the child). So a ShellExecutor starts, on its first
launch, one helper (`python -I -S -c SPAWNER`, stdlib only, one thread) in a session of its
own, connected by a unix SOCK_SEQPACKET socket pair. Per launch it sends the request (run
directory, hold seconds, argv, environment, cwd: JSON, in memory only; its size and first
32 KiB in one message) with the run's stdin, stdout, stderr, the report channel's write end
(a SOCK_SEQPACKET socket pair of the run's own) and the wake pipe's read end (SCM_RIGHTS);
the spawner starts the wrapper in a new session and closes its copies. It answers nothing:
the wrapper reports to the launcher itself, on the report channel, so no launch waits for
a round trip through the spawner behind another's (one round trip at a time, each waiting
for the GIL in a busy scheduler, was the limit of a daemon's shell launches: ~3.8 ms each).
A spawner that cannot start the wrapper says b"e" and the errno on the run's report
channel. The wrapper is the native one (`shell_native`: a tiny
C program, posix_spawned with those five fds as 0-4 and SIGHUP, SIGINT and SIGTERM blocked;
it ignores SIGPIPE and SIGXFSZ itself, as `child` does: no copy of the spawner's memory)
when it could be built,
else `child` below, forked (its copy-on-write page faults cost ~1.2 ms of CPU per run).
It reaps its children (SIGCHLD through a wakeup pipe: no timer) and exits when the
scheduler's end of the socket closes, so a wrapper holding its command back sees its parent
change and gives up, as before. A spawner that died is started again on the next launch.

The wrapper (`child`, or the native program, which does the same) is the protocol of
`shell_wrapper`: it takes an flock on the run directory (held while it lives: evidence any
pid namespace can read), says b"h<pid> <start time>" on the report channel (the start time
is field 22 of /proc/self/stat, -1 if unknown), with a pidfd of itself (SCM_RIGHTS; opened
by the wrapper for itself, so it cannot name a reused pid; without one where the kernel has
no pidfd_open or the channel is a pipe), and holds the command back until the
file `go` appears (the launcher creates it once the launch is pinned, then writes to the
wake pipe, which wakes the wrapper at once). If its parent changes (the scheduler and so
the spawner died), the wake pipe reaches its end, or `hold` seconds pass, it creates
`abandoned` and exits 125 having started nothing; it looks for `go` every 20 ms at most.
Let go, it posix_spawns the command (argv, cwd, environment and standard streams as given;
every signal at its default, none blocked), says b"ok" or the errno, waits, and writes the
exit code (-N: signal N) to `status` atomically. It blocks SIGHUP, SIGINT and SIGTERM,
which the command gets at their default, so that it outlives a command they stop.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time

import msgspec

from rota.application.errors import ExecutorError
from rota.infrastructure.executors.shell_native import native_wrapper

CHUNK = 32 * 1024  # request bytes per message (SOCK_SEQPACKET keeps each whole); the first
# message also holds the request's size and its file descriptors

SPAWNER = r"""
import fcntl, json, os, select, signal, socket, struct, sys, time
HELD = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)
DEFAULTS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD) + HELD

def readable(fd, timeout):
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0, int(timeout * 1000) + 1)))

def say(report, message):
    try:
        os.write(report, message)
    except OSError:
        pass

def say_held(report):
    # b"h<pid> <start time>", with a pidfd of itself where the channel is a socket
    text = ("h%d %d" % (os.getpid(), started(os.getpid()))).encode()
    try:
        pidfd = os.pidfd_open(os.getpid())
    except (AttributeError, OSError):
        return say(report, text)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=os.dup(report))
    try:
        sock.sendmsg([text], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", pidfd))],
                     socket.MSG_NOSIGNAL)
    except OSError:  # not a socket (a pipe): the text alone
        say(report, text)
    finally:
        sock.close()
        os.close(pidfd)

def child(run, report, wake, launcher, hold, argv, env, cwd):
    try:
        os.setsid()
        os.set_inheritable(report, False)  # received fds are inheritable: not the command's
        os.set_inheritable(wake, False)
        signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
        fcntl.flock(os.open(run, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), fcntl.LOCK_EX)
        if cwd is not None:
            try:
                os.chdir(cwd)
            except OSError as error:
                say(report, b"e" + str(error.errno or 0).encode())
                return 127
        say_held(report)
        go, waking, until = os.path.join(run, "go"), True, time.monotonic() + hold
        while not os.path.exists(go):
            if not waking or os.getppid() != launcher or time.monotonic() >= until:
                os.close(os.open(os.path.join(run, "abandoned"), os.O_WRONLY | os.O_CREAT, 0o600))
                return 125
            if readable(wake, 0.02) and not os.read(wake, 64):
                waking = False
        os.close(wake)
        if "PATH" in env:
            os.environ["PATH"] = env["PATH"]  # posix_spawnp searches our own PATH
        else:
            os.environ.pop("PATH", None)
        try:
            pid = os.posix_spawnp(argv[0], argv, env, setsigdef=DEFAULTS, setsigmask=())
        except OSError as error:
            say(report, str(error.errno or 0).encode())
            return 127
        say(report, b"ok")
        os.close(report)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        temporary = os.path.join(run, "status.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, ("%d\n" % code).encode())
        os.close(fd)
        os.replace(temporary, os.path.join(run, "status"))
        return code if code >= 0 else 128 - code
    except BaseException:
        return 127

def started(pid):
    # Field 22 of /proc/PID/stat (-1: unknown), read here, off the scheduler's threads.
    try:
        with open("/proc/%d/stat" % pid, "rb") as file:
            raw = file.read()
        return int(raw[raw.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return -1

def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return

def spawn(request, fds):
    # The native wrapper, started without a fork (None: it could not be: fork instead).
    copies = []  # a received fd numbered 0-4 could be overwritten by another's dup2
    try:
        sources = []
        for fd in fds:
            if fd <= 4:
                copies.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 5))
                fd = copies[-1]
            os.set_inheritable(fd, False)  # only their copies as 0-4 are the wrapper's
            sources.append(fd)
        hold = repr(float(request["hold"]))
        argv = [NATIVE, request["run"], hold, request["cwd"] or ""] + request["argv"]
        actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(sources)]
        return os.posix_spawn(NATIVE, argv, request["env"], file_actions=actions, setsid=True,
                              setsigmask=HELD, setsigdef=DEFAULTS)
    except Exception:  # e.g. no POSIX_SPAWN_SETSID in this build: fork `child` instead
        return None
    finally:
        for fd in copies:
            os.close(fd)

def serve(sock):
    sock.set_inheritable(False)
    woken, waker = os.pipe()
    os.set_blocking(waker, False)
    signal.set_wakeup_fd(waker)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    for number in (signal.SIGHUP, signal.SIGINT):
        signal.signal(number, signal.SIG_IGN)
    poller = select.poll()  # not select(): the scheduler may hand it an fd above 1023
    poller.register(sock, select.POLLIN)
    poller.register(woken, select.POLLIN)
    while True:
        try:
            ready = [fd for fd, _ in poller.poll()]
        except InterruptedError:
            continue
        if woken in ready:
            os.read(woken, 4096)
            reap()
        if sock.fileno() not in ready:
            continue
        first, fds, _, _ = socket.recv_fds(sock, 8 + CHUNK, 5)
        if len(first) < 8:
            return  # the scheduler is gone
        (size,) = struct.unpack("!Q", first[:8])
        body = first[8:]
        while len(body) < size:
            part = sock.recv(65536)
            if not part:
                return
            body += part
        try:
            request = json.loads(body)
            pid = spawn(request, fds) if NATIVE else None
            if pid is None:
                pid = os.fork()
        except Exception as error:  # nothing started: say why on the run's report channel
            if len(fds) == 5:
                say(fds[3], b"e" + str(getattr(error, "errno", 0) or 0).encode())
            pid = -1
        if pid == 0:
            code = 127
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                sock.close()
                os.close(woken)
                os.close(waker)
                stdin, stdout, stderr, report, wake = fds
                for target, fd in enumerate((stdin, stdout, stderr)):
                    os.dup2(fd, target)
                for fd in (stdin, stdout, stderr):
                    if fd > 2:
                        os.close(fd)
                code = child(request["run"], report, wake, os.getppid(), request["hold"],
                             request["argv"], request["env"], request["cwd"])
            finally:
                os._exit(code)
        for fd in fds:  # the wrapper reports to the scheduler itself: no answer here
            os.close(fd)

NATIVE = sys.argv[2] if len(sys.argv) > 2 else ""
CHUNK = int(sys.argv[3])
serve(socket.socket(fileno=int(sys.argv[1])))
"""


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
        native = native_wrapper() or ""  # none: fork the Python wrapper
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", SPAWNER, str(theirs.fileno()), native,
                 str(CHUNK)],
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
        request = {"run": run, "hold": hold, "argv": argv, "env": env, "cwd": cwd}
        try:
            body = msgspec.json.encode(request)
        except UnicodeEncodeError:  # a lone surrogate (an undecodable byte of os.environ)
            body = json.dumps(request).encode()  # escapes it; the spawner's json restores it
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

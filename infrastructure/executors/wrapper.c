/* rota-wrapper: a shell run's wrapper as a small C program, built when the package is built
   or installed (setup.py, `build_wrapper`), never at run time. It is the protocol of the
   spawner's Python `child` (infrastructure/executors/shell_spawner.py), step for step, with
   the same files, messages and exit codes:

       rota-wrapper RUN HOLD_SECONDS CWD PROGRAM [ARG...]    (CWD "" for none)

   with the run's stdin, stdout and stderr as 0, 1 and 2, the report channel's write end as 3
   and the wake pipe's read end as 4, posix_spawned by the spawner in a session of its own
   with SIGHUP, SIGINT and SIGTERM blocked; it ignores SIGPIPE and SIGXFSZ itself, as `child`
   does, and the command gets every signal at its default. Its environment is the command's
   (posix_spawnp searches its PATH, as `child` does by setting its own). Linked statically
   where the C library allows: no dynamic loading per run, and the job's LD_* variables,
   which are the wrapper's environment too, do not reach it. */
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
enum { REPORT = 3, WAKE = 4, LOOK_MS = 250 };

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
        /* The launcher's death ends the wake pipe at once; the parent pid and the hold
           deadline are looked at every LOOK_MS at most (a long hold wakes little). */
        double left = (until - now()) * 1000;
        int wait = left < 0 ? 0 : left < LOOK_MS ? (int)left + 1 : LOOK_MS;
        if (poll(&wake, 1, wait) > 0) {
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

/* A static stand-in for runc and for nvidia-container-cli in bench/bench_runtime.py.
 *
 * CPU time survives exec: a process that runs the shim (sh, then Python or Go) and then execs
 * this program still carries what it used before. So the first thing done here is
 * getrusage(RUSAGE_SELF), and the user + system microseconds are appended, with the arguments,
 * as one line to RECORDER_LOG: the CPU of the runtime or hook that exec'd us, measured, not
 * estimated. Then, as runc's stand-in, it execs the real runc (RECORDER_TARGET) with the same
 * arguments; as nvidia-container-cli's (no RECORDER_TARGET), it exits 0.
 *
 * Both paths are compiled in (-DRECORDER_LOG=..., -DRECORDER_TARGET=...): the runtime and the
 * hook run with environments they build themselves, and a static binary costs next to nothing
 * to start, the same for every runtime compared. With -DRECORDER_CLOCK the line ends with one
 * more field, `clock=NS`: CLOCK_MONOTONIC when this program started (bench/bench_many.py
 * orders the calls of many containers started at once by it). With -DRECORDER_CHILDREN the
 * CPU logged adds RUSAGE_CHILDREN: the programs the runtime or hook ran and waited for (a
 * launcher's stat and readlink) count too, as that total survives exec as well.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    struct rusage ru;
    char line[8192];
    size_t n;
    int fd, i;

    getrusage(RUSAGE_SELF, &ru);
#ifdef RECORDER_CHILDREN
    {
        struct rusage kids;
        getrusage(RUSAGE_CHILDREN, &kids);
        ru.ru_utime.tv_sec += kids.ru_utime.tv_sec;
        ru.ru_utime.tv_usec += kids.ru_utime.tv_usec;
        ru.ru_stime.tv_sec += kids.ru_stime.tv_sec;
        ru.ru_stime.tv_usec += kids.ru_stime.tv_usec;
    }
#endif
#ifdef RECORDER_CLOCK
    struct timespec ts;
    char stamp[40];
    clock_gettime(CLOCK_MONOTONIC, &ts);
    snprintf(stamp, sizeof stamp, "\tclock=%lld%09ld", (long long)ts.tv_sec, ts.tv_nsec);
#endif
    n = (size_t)snprintf(line, sizeof line, "%ld",
                         (long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000L
                             + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    for (i = 1; i < argc && n < sizeof line - 42; i++) {
        size_t len = strlen(argv[i]);
        if (len > sizeof line - 42 - n - 1)
            len = sizeof line - 42 - n - 1;
        line[n++] = '\t';
        memcpy(line + n, argv[i], len);
        n += len;
    }
#ifdef RECORDER_CLOCK
    memcpy(line + n, stamp, strlen(stamp));
    n += strlen(stamp);
#endif
    line[n++] = '\n';
    fd = open(RECORDER_LOG, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, line, n) < 0)
            return 125;
        close(fd);
    }
#ifdef RECORDER_TARGET
    argv[0] = RECORDER_TARGET;
    execv(RECORDER_TARGET, argv);
    return 127;
#else
    return 0;
#endif
}

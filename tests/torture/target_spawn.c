/* Starting linerate-target for the torture programs: see target_spawn.h. */
#include "target_spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

pid_t target_spawn(const char *const argv[], const char *url, const char *log)
{
    /* a URL left by an earlier try must not pass for this one's */
    unlink(url);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(2);
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int o = open(url, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int l = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (o < 0 || l < 0)
            _exit(127);
        dup2(o, 1);
        dup2(l, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        struct stat sb;
        if (stat(url, &sb) == 0 && sb.st_size > 0)
            return pid;
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return -1; /* e.g. the port still held by one just killed */
        usleep(50000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

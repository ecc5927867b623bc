/*
 * SIGPIPE held off a remote call (see sigpipe.h).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "store/remote/sigpipe.h"

static int sigpipe_pending(void)
{
    sigset_t pending;
    return sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
}

void fi__sigpipe_block(fi_sigpipe_guard *g)
{
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    g->was_pending = sigpipe_pending();
    pthread_sigmask(SIG_BLOCK, &pipe_only, &g->old);
}

void fi__sigpipe_restore(fi_sigpipe_guard *g)
{
    if (!g->was_pending && sigpipe_pending()) {
        sigset_t pipe_only;
        struct timespec zero = {0, 0};
        sigemptyset(&pipe_only);
        sigaddset(&pipe_only, SIGPIPE);
        while (sigtimedwait(&pipe_only, NULL, &zero) < 0 && errno == EINTR) {}
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

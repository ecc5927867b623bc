/*
 * SIGPIPE held off a remote call. A write to a server that went away raises
 * SIGPIPE, which kills a process that has not ignored it, and a library must
 * not change a process's signal handling. So SIGPIPE is blocked on this
 * thread for the call, and one the call raised is taken before it is
 * unblocked (one that was pending before is left for the process).
 */
#ifndef FI_STORE_REMOTE_SIGPIPE_H
#define FI_STORE_REMOTE_SIGPIPE_H

#include <signal.h>

typedef struct fi_sigpipe_guard {
    sigset_t old;
    int was_pending;
} fi_sigpipe_guard;

void fi__sigpipe_block(fi_sigpipe_guard *g);
void fi__sigpipe_restore(fi_sigpipe_guard *g);

#endif

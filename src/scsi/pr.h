/* Jobs (pr.c): a change of the reservation state, applied here under the LUN lock or, for a
 * LUN several gateways share, to a fresh copy of the shared object on the helper thread. What
 * the command files (pr_in.c, pr_out.c, pr_check.c) hand them. */
#ifndef LR_SCSI_PR_H
#define LR_SCSI_PR_H

#include <stdio.h>

#include "scsi/pr_state.h"

/* A change of the state, local or through the cluster (pr.c) */
enum pr_kind {
    PRJ_OUT,       /* PERSISTENT RESERVE OUT */
    PRJ_RESERVE,   /* SPC-2 RESERVE */
    PRJ_RELEASE,   /* SPC-2 RELEASE */
    PRJ_SPC2_DROP, /* SPC-2 reservation ends: nexus loss (port), reset ("") */
    PRJ_IN,        /* PERSISTENT RESERVE IN: re-read the shared state first */
    PRJ_RELOAD,    /* the watch broke: re-arm it and re-read */
    PRJ_RESET,     /* a reset here: the other gateways raise its unit attention too */
};
/* The change a PERSISTENT RESERVE OUT makes to ps (the mirror or a fresh copy of the shared
 * state), its side effects written to fx; and the reply PERSISTENT RESERVE IN builds, with the
 * LUN lock held (malloc'd, *len its length). */
typedef scsi_sr (*pr_apply_fn)(struct scsi_task *t, struct pr_state *ps, FILE *fx);
typedef uint8_t *(*pr_build_fn)(struct scsi_task *t, uint32_t *len);
/* A task's job (kind PRJ_OUT with its apply, PRJ_IN with its build, PRJ_RESERVE and
 * PRJ_RELEASE with neither); a task that cannot have one is answered here. */
void pr_job_run(struct scsi_task *t, enum pr_kind kind, pr_apply_fn apply, pr_build_fn build);

#endif

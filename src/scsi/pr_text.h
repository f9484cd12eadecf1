/* The reservation state as text (pr_text.c): its escaped fields, the side-effect lines a change
 * leaves for every gateway, the APTPL state file and the mirror of the shared state. */
#ifndef LR_SCSI_PR_TEXT_H
#define LR_SCSI_PR_TEXT_H

#include <stdio.h>

#include "scsi/pr_state.h"

void pr_field_nexus(FILE *f, const char *port, uint16_t tport);
void pr_fx_ua(FILE *fx, const char *port, uint16_t tport, unsigned bits);
void pr_fx_ua_registrants(FILE *fx, const struct pr_state *ps, const char *port, uint16_t tport,
                          unsigned bits);
void pr_fx_apply(struct scsi_lun *lu, const char *text, struct scsi_join *join);
char *pr_state_format(const struct pr_state *ps);
int pr_state_parse(struct pr_state *ps, const char *text, bool notify, const char *what, char *err,
                   size_t errlen);
int pr_state_persist(struct pr_state *ps, bool was_aptpl);
int pr_state_snapshot(struct pr_state *snap, const struct pr_state *ps);
void pr_state_restore(struct pr_state *ps, struct pr_state *snap);
int pr_state_load(struct pr_state *ps, char *err, size_t errlen);
void pr_state_clear(struct pr_state *ps);
void pr_mirror_install(struct scsi_lun *lu, struct pr_state *src, uint64_t ver);

#endif

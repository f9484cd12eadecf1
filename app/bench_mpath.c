/* linerate-bench over several portals of one LUN (--portal): the portal list, one
 * lr_mpath device per session in place of a session, the I/O calls that go to either, and
 * the report of each path and of the longest I/O pause. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* HOST[:PORT] items, comma-separated; a bare IPv6 address in brackets: [ADDR][:PORT]. */
int bench_portal_add(struct bench_opts *o, const char *list)
{
    char *copy = strdup(list);
    int rc = copy ? 0 : -1;
    for (char *save = NULL, *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok && !rc;
         tok = strtok_r(NULL, ",", &save)) {
        if (o->nportals + 1 >= LR_MPATH_MAX_PATHS) {
            fprintf(stderr, "linerate-bench: at most %d portals\n", LR_MPATH_MAX_PATHS);
            rc = -1;
            break;
        }
        char *host = tok, *port = NULL;
        if (host[0] == '[') {
            char *close = strchr(host, ']');
            if (!close || (close[1] && close[1] != ':')) {
                rc = -1;
                break;
            }
            *close = '\0';
            host++;
            port = close[1] ? close + 2 : NULL;
        } else if ((port = strrchr(host, ':')) != NULL) {
            *port++ = '\0';
        }
        unsigned long p = 3260;
        char *end = NULL;
        if (port && ((p = strtoul(port, &end, 10)) == 0 || p > 65535 || *end))
            rc = -1;
        if (!host[0] || strlen(host) >= sizeof(o->portals[0].host))
            rc = -1;
        if (rc)
            break;
        strcpy(o->portals[o->nportals].host, host);
        o->portals[o->nportals].port = (uint16_t)p;
        o->nportals++;
    }
    if (rc)
        fprintf(stderr, "linerate-bench: bad --portal value '%s' (want HOST[:PORT],...)\n", list);
    free(copy);
    return rc;
}

struct lr_mpath *bench_mpath_create(struct reactor *r, const struct lr_session_opts *so,
                                    const struct bench_opts *o)
{
    struct lr_mpath_opts mo = {.session = *so, .npaths = 1 + o->nportals};
    memset(mo.session.conn_reactors, 0, sizeof(mo.session.conn_reactors));
    mo.hosts[0] = o->url.host;
    mo.ports[0] = o->url.port;
    for (unsigned i = 0; i < o->nportals; i++) {
        mo.hosts[i + 1] = o->portals[i].host;
        mo.ports[i + 1] = o->portals[i].port;
    }
    return lr_mpath_create(r, &mo);
}

int bench_io(struct lr_session *s, struct lr_mpath *mp, bool write, uint64_t lba, uint32_t nb,
             uint32_t bs, void *buf, lr_done_fn done, void *arg)
{
    if (mp)
        return write ? lr_mpath_write(mp, lba, nb, bs, buf, done, arg)
                     : lr_mpath_read(mp, lba, nb, bs, buf, done, arg);
    return write ? lr_write(s, lba, nb, bs, buf, done, arg)
                 : lr_read(s, lba, nb, bs, buf, done, arg);
}

void bench_mpath_report(FILE *f, int id, const struct lr_mpath *mp, double pause_ms)
{
    uint64_t lost, reissued;
    lr_mpath_counts(mp, &lost, &reissued);
    fprintf(f,
            "linerate-bench: session %d: multipath: %llu path%s lost, %llu command%s issued "
            "again, longest I/O pause %.1f ms\n",
            id, (unsigned long long)lost, lost == 1 ? "" : "s", (unsigned long long)reissued,
            reissued == 1 ? "" : "s", pause_ms);
    for (unsigned i = 0; i < 1 + LR_MPATH_MAX_PATHS; i++) {
        struct lr_mpath_path_info pi;
        if (!lr_mpath_path_info(mp, i, &pi))
            break;
        fprintf(f,
                "linerate-bench: session %d: path %u %s:%u group %d %s%s: %llu commands "
                "(%llu failed over to it), logged in again %llu times, %llu commands since\n",
                id, i, pi.host, pi.port, pi.group, lr_alua_state_name(pi.state),
                pi.lost           ? " (lost)"
                : pi.login_failed ? " (login failed)"
                                  : "",
                (unsigned long long)pi.commands, (unsigned long long)pi.reissued,
                (unsigned long long)pi.relogins, (unsigned long long)pi.commands_now);
    }
}

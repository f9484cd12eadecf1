/* libFuzzer harness for the configuration file parser (src/daemon/config.c, conf_keys*.c,
 * chap_conf.c, alua_conf.c) and the writer linerate-ctl save uses (conf_write.c).
 *
 * The input is the file: it goes into a memfd and target_config_load() reads it through
 * /proc/self/fd (the same fopen/getline path a file on disk takes). Nothing is built from it: no
 * store is opened, no socket bound. A file that loads is written back out the way `save` writes
 * it to a new file (globals, then each [target] section) and that text
 * must load again: the daemon never writes a config it would refuse at the next start. A
 * chap-secrets key names a file the loader reads (never writes); the harness runs in a scratch
 * directory of its own, so a relative name finds nothing. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/config.h"
#include "util/log.h"

#define MAX_INPUT (256u * 1024)

static int input_fd = -1, out_fd = -1;

static void setup_once(void)
{
    if (input_fd >= 0)
        return;
    log_set_level(getenv("FUZZ_LOG") ? LOG_LVL_DEBUG : LOG_LVL_ERROR);
    char dir[256];
    const char *tmp = getenv("TMPDIR"); /* run.sh: a directory in the build dir */
    snprintf(dir, sizeof(dir), "%s/fuzz_config.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir) || chdir(dir) < 0)
        abort();
    input_fd = memfd_create("fuzz_config", MFD_CLOEXEC);
    out_fd = memfd_create("fuzz_config_saved", MFD_CLOEXEC);
    if (input_fd < 0 || out_fd < 0)
        abort();
}

static void fill(int fd, const uint8_t *data, size_t size)
{
    if (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0)
        abort();
    for (size_t off = 0; off < size;) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0)
            abort();
        off += (size_t)n;
    }
}

/* The config as `save` writes it to a new file (ctl_save.c render() without a layout):
 * globals, then each section with what differs from the built-in section defaults. */
static void write_back(const struct target_config *cfg)
{
    struct target_section_defaults defs;
    memset(&defs, 0, sizeof(defs));
    target_params_default(&defs.params);
    defs.chap_algs = cfg->chap_algs;
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        abort();
    target_conf_write_globals(m, cfg, cfg->log_level);
    for (unsigned i = 0; i < cfg->ntargets; i++) {
        fputc('\n', m);
        target_conf_write_section(m, &cfg->targets[i], &defs);
    }
    if (fclose(m) != 0)
        abort();
    fill(out_fd, (const uint8_t *)text, len);
    char path[64], err[1024] = "";
    snprintf(path, sizeof(path), "/proc/self/fd/%d", out_fd);
    struct target_config again;
    target_config_init(&again);
    if (target_config_load(&again, path, err, sizeof(err)) < 0) {
        fprintf(stderr, "fuzz_config: the written-back config does not load: %s\n--- text:\n%s",
                err, text);
        abort();
    }
    if (again.ntargets != cfg->ntargets) {
        fprintf(stderr, "fuzz_config: %u targets written back as %u\n", cfg->ntargets,
                again.ntargets);
        abort();
    }
    target_config_free(&again);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup_once();
    if (size > MAX_INPUT)
        return 0;
    fill(input_fd, data, size);
    char path[64], err[1024] = "";
    snprintf(path, sizeof(path), "/proc/self/fd/%d", input_fd);
    struct target_config cfg;
    target_config_init(&cfg);
    int rc = target_config_load(&cfg, path, err, sizeof(err));
    if (rc < 0 && !err[0]) {
        fprintf(stderr, "fuzz_config: load failed without a reason\n");
        abort();
    }
    if (rc == 0)
        write_back(&cfg);
    target_config_free(&cfg);
    return 0;
}

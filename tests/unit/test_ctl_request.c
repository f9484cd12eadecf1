/* Unit tests of linerate-ctl's verbs-to-request mapping (app/ctl/request.c) for the LUN verbs,
 * which take the target name or leave it out (issue 15 spells `set lun N ro|rw` and `resize lun
 * N SIZE`): the request carries a "target" parameter only when the command line names one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "ctl/ctl.h"

#define T "iqn.2026-11.org.linerate:default"

/* Parse a NULL-terminated verb line; returns ctl_req_from_argv's result, the request in *req
 * (its params to be freed by the caller) and any message in err. */
static int parse(struct ctl_req *req, char *err, size_t errlen, ...)
{
    char *argv[16];
    int argc = 0;
    va_list ap;
    va_start(ap, errlen);
    for (char *a; (a = va_arg(ap, char *)) != NULL && argc < 16;)
        argv[argc++] = a;
    va_end(ap);
    memset(req, 0, sizeof(*req));
    err[0] = '\0';
    return ctl_req_from_argv(argc, argv, req, err, errlen);
}

static const char *target_of(const struct ctl_req *req)
{
    json_t *t = json_object_get(req->params, "target");
    return t ? json_string_value(t) : NULL;
}

static json_int_t int_of(const struct ctl_req *req, const char *key)
{
    return json_integer_value(json_object_get(req->params, key));
}

static void test_set_lun_both_forms(void **state)
{
    (void)state;
    struct ctl_req r;
    char err[256];
    assert_int_equal(parse(&r, err, sizeof(err), "set", "lun", "1", "ro", NULL), 0);
    assert_string_equal(r.method, "set_lun");
    assert_null(target_of(&r));
    assert_int_equal(int_of(&r, "lun"), 1);
    assert_true(json_is_true(json_object_get(r.params, "read_only")));
    json_decref(r.params);

    assert_int_equal(parse(&r, err, sizeof(err), "set", "lun", T, "3", "rw", NULL), 0);
    assert_string_equal(target_of(&r), T);
    assert_int_equal(int_of(&r, "lun"), 3);
    assert_true(json_is_false(json_object_get(r.params, "read_only")));
    json_decref(r.params);

    /* caps go to the daemon as text, which it parses (daemon/lun_limits.c) */
    assert_int_equal(parse(&r, err, sizeof(err), "set", "lun", T, "2", "iops=500,burst=1s", NULL),
                     0);
    assert_string_equal(json_string_value(json_object_get(r.params, "limits")),
                        "iops=500,burst=1s");
    assert_null(json_object_get(r.params, "read_only"));
    json_decref(r.params);
    assert_int_equal(parse(&r, err, sizeof(err), "set", "lun", "2", "none", NULL), 0);
    assert_string_equal(json_string_value(json_object_get(r.params, "limits")), "none");
    json_decref(r.params);

    assert_int_equal(parse(&r, err, sizeof(err), "set", "lun", "1", "maybe", NULL), -1);
    assert_non_null(strstr(err, "'maybe' is neither"));
    json_decref(r.params);
    assert_int_equal(parse(&r, err, sizeof(err), "set", "lun", "1", NULL), -1);
    assert_non_null(strstr(err, "usage: set lun [TARGET] N ro|rw"));
    json_decref(r.params);
    assert_int_equal(parse(&r, err, sizeof(err), "set", "lun", T, "1", "ro", "x", NULL), -1);
    json_decref(r.params);
}

static void test_resize_lun_both_forms(void **state)
{
    (void)state;
    struct ctl_req r;
    char err[256];
    assert_int_equal(parse(&r, err, sizeof(err), "resize", "lun", "1", "32M", NULL), 0);
    assert_string_equal(r.method, "resize_lun");
    assert_null(target_of(&r));
    assert_int_equal(int_of(&r, "lun"), 1);
    assert_string_equal(json_string_value(json_object_get(r.params, "size")), "32M");
    json_decref(r.params);

    assert_int_equal(parse(&r, err, sizeof(err), "resize", "lun", T, "2", "1G", NULL), 0);
    assert_string_equal(target_of(&r), T);
    assert_int_equal(int_of(&r, "lun"), 2);
    assert_string_equal(json_string_value(json_object_get(r.params, "size")), "1G");
    json_decref(r.params);

    assert_int_equal(parse(&r, err, sizeof(err), "resize", "lun", "1", NULL), -1);
    assert_non_null(strstr(err, "usage: resize lun [TARGET] N SIZE"));
    json_decref(r.params);
}

static void test_remove_lun_both_forms(void **state)
{
    (void)state;
    struct ctl_req r;
    char err[256];
    assert_int_equal(parse(&r, err, sizeof(err), "remove", "lun", T, "1", NULL), 0);
    assert_string_equal(r.method, "remove_lun");
    assert_string_equal(target_of(&r), T);
    assert_int_equal(int_of(&r, "lun"), 1);
    json_decref(r.params);

    assert_int_equal(parse(&r, err, sizeof(err), "remove", "lun", "4", "--timeout", "3", NULL), 0);
    assert_null(target_of(&r));
    assert_int_equal(int_of(&r, "lun"), 4);
    assert_int_equal(int_of(&r, "timeout"), 3);
    json_decref(r.params);

    assert_int_equal(parse(&r, err, sizeof(err), "remove", "lun", T, "4", "--timeout", "3", NULL),
                     0);
    assert_string_equal(target_of(&r), T);
    assert_int_equal(int_of(&r, "timeout"), 3);
    json_decref(r.params);

    assert_int_equal(parse(&r, err, sizeof(err), "remove", "lun", NULL), -1);
    assert_non_null(strstr(err, "usage: remove lun [TARGET] N"));
    json_decref(r.params);
    /* the LUN number is checked whichever form */
    assert_int_equal(parse(&r, err, sizeof(err), "remove", "lun", T, "x", NULL), -1);
    json_decref(r.params);
}

/* remove target, add/remove allow and reload take --force (and all but reload --timeout)
 * through the same option parser as the LUN verbs; each verb takes only its own options. */
static void test_force_and_timeout_options(void **state)
{
    (void)state;
    struct ctl_req r;
    char err[256];
    assert_int_equal(
        parse(&r, err, sizeof(err), "remove", "target", T, "--force", "--timeout", "7", NULL), 0);
    assert_string_equal(r.method, "remove_target");
    assert_true(json_is_true(json_object_get(r.params, "force")));
    assert_int_equal(int_of(&r, "timeout"), 7);
    json_decref(r.params);

    assert_int_equal(parse(&r, err, sizeof(err), "remove", "allow", T, "iqn.2026-11.org.x:i",
                           "--timeout", "2", NULL),
                     0);
    assert_string_equal(r.method, "remove_allow");
    assert_null(json_object_get(r.params, "force"));
    assert_int_equal(int_of(&r, "timeout"), 2);
    json_decref(r.params);

    /* add allow takes --force too (it ends the sessions it no longer allows) */
    assert_int_equal(
        parse(&r, err, sizeof(err), "add", "allow", T, "iqn.2026-11.org.x:i", "--force", NULL), 0);
    assert_string_equal(r.method, "add_allow");
    assert_true(json_is_true(json_object_get(r.params, "force")));
    json_decref(r.params);

    /* the entry verbs: ENTRY then their words, options after */
    assert_int_equal(parse(&r, err, sizeof(err), "map", "lun", T, "g1", "3", "1", "--ro", NULL), 0);
    assert_string_equal(r.method, "map_lun");
    assert_string_equal(json_string_value(json_object_get(r.params, "entry")), "g1");
    assert_int_equal(int_of(&r, "host_lun"), 3);
    assert_int_equal(int_of(&r, "lun"), 1);
    assert_true(json_is_true(json_object_get(r.params, "read_only")));
    json_decref(r.params);
    assert_int_equal(parse(&r, err, sizeof(err), "add", "group", T, "g1", "iqn.2026-11.org.x:a",
                           "iqn.2026-11.org.x:b", NULL),
                     0);
    assert_string_equal(r.method, "add_group");
    assert_int_equal(json_array_size(json_object_get(r.params, "initiators")), 2);
    json_decref(r.params);
    assert_int_equal(parse(&r, err, sizeof(err), "set", "chap", T, "g1", "none", NULL), 0);
    assert_string_equal(r.method, "set_host_chap");
    assert_string_equal(json_string_value(json_object_get(r.params, "user")), "");
    json_decref(r.params);
    assert_int_equal(parse(&r, err, sizeof(err), "remove", "host", T, "g1", "--force", NULL), 0);
    assert_string_equal(r.method, "remove_host");
    assert_true(json_is_true(json_object_get(r.params, "force")));
    json_decref(r.params);
    assert_int_equal(parse(&r, err, sizeof(err), "map", "lun", T, "g1", "3", "x", NULL), -1);
    assert_string_equal(err, "bad LUN 'x': expected a number from 0 to 16383");
    json_decref(r.params);

    /* the portal verbs take neither option */
    assert_int_equal(parse(&r, err, sizeof(err), "add", "portal", T, "127.0.0.1", "--force", NULL),
                     -1);
    assert_string_equal(err, "unexpected argument '--force'");
    json_decref(r.params);
    assert_int_equal(
        parse(&r, err, sizeof(err), "remove", "portal", T, "127.0.0.1", "--timeout", "2", NULL),
        -1);
    assert_string_equal(err, "unexpected argument '--timeout'");
    json_decref(r.params);

    /* a timeout is a bounded number; --timeout with no value is no option at all */
    assert_int_equal(parse(&r, err, sizeof(err), "remove", "target", T, "--timeout", "3601", NULL),
                     -1);
    assert_non_null(strstr(err, "bad timeout '3601'"));
    json_decref(r.params);
    assert_int_equal(parse(&r, err, sizeof(err), "remove", "target", T, "--timeout", NULL), -1);
    assert_string_equal(err, "unexpected argument '--timeout'");
    json_decref(r.params);

    assert_int_equal(parse(&r, err, sizeof(err), "reload", "--force", NULL), 0);
    assert_string_equal(r.method, "reload");
    assert_true(json_is_true(json_object_get(r.params, "force")));
    json_decref(r.params);
    assert_int_equal(parse(&r, err, sizeof(err), "reload", "--timeout", "3", NULL), -1);
    assert_string_equal(err, "usage: reload [--force]");
    json_decref(r.params);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_lun_both_forms),
        cmocka_unit_test(test_resize_lun_both_forms),
        cmocka_unit_test(test_remove_lun_both_forms),
        cmocka_unit_test(test_force_and_timeout_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

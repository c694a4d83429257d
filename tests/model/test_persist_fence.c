/* The owner's fence on session files (fg_engine_options.persist_fence, what
 * the gateway's session directory uses between instances sharing
 * persist_dir), on the tiny model in serving mode:
 *  - while the fence allows, each completed response writes the file, and the
 *    fence is asked with the session's tenant and name on the writer thread;
 *  - once it refuses, a completed response leaves the file byte for byte as
 *    it was and the session gets a SAVE_FAILED event (FG_ERR_STATE),
 *    fg_session_save fails the same way, and fg_session_delete leaves the
 *    file (it is another instance's now);
 *  - allowed again, the next save writes it. */
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/base/clock.h"
#include "tests/model/model_test.h"

static atomic_bool allow = true;
static atomic_int asked, refused;
static char asked_for[160];

static bool fence(void *user, const char *tenant, const char *name)
{
    (void)user;
    atomic_fetch_add(&asked, 1);
    snprintf(asked_for, sizeof asked_for, "%s/%s", tenant, name);
    bool ok = atomic_load(&allow);
    if (!ok)
        atomic_fetch_add(&refused, 1);
    return ok;
}

/* One response of max_tokens; returns the SAVE_FAILED error seen before DONE (FG_OK: none). */
static fg_err turn(fg_session_t *s, const int32_t *in, int n, bool wait_save)
{
    fg_diag d = {{0}};
    CHECK_MSG(fg_session_append(s, in, n, &d) == FG_OK, "append: %s", d.msg);
    fg_response_params p = {.sampling = fg_sampling_default(), .max_tokens = 4, .generate = true};
    CHECK_MSG(fg_session_respond(s, &p, NULL, &d) == FG_OK, "respond: %s", d.msg);
    fg_err save = FG_OK;
    bool done = false;
    /* 120 s is a backstop for sanitizer builds; the save event follows DONE by the writer's time */
    for (double t0 = fg_clock_mono_s(); fg_clock_mono_s() - t0 < 120 && (!done || (wait_save && save == FG_OK));
         usleep(1000)) {
        fg_event ev[16];
        char text[4096];
        int k = fg_session_poll(s, ev, 16, text, sizeof text);
        for (int i = 0; i < k; i++) {
            done |= ev[i].type == FG_EVENT_DONE;
            if (ev[i].type == FG_EVENT_SAVE_FAILED)
                save = ev[i].error;
        }
    }
    CHECK(done);
    return save;
}

static bool read_all(const char *path, char **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc(*len ? *len : 1);
    bool ok = *buf && fread(*buf, 1, *len, f) == *len;
    fclose(f);
    return ok;
}

int main(void)
{
    char root[128], path[256];
    snprintf(root, sizeof root, "/tmp/fg_test_fence.%d", (int)getpid());
    fg_engine_options o;
    fg_engine_options_default(&o);
    o.model_path = model_path("tiny.gguf");
    o.kv_format = FG_KV_F32;
    o.max_batch_tokens = 256;
    o.n_threads = 2;
    o.kv_budget_bytes = (size_t)64 << 20;
    o.serve = true;
    o.persist_dir = root;
    o.persist_fence = fence;
    fg_engine_t *e = open_engine_with(&o);
    fg_engine_info info;
    fg_engine_get_info(e, &info);
    int32_t in[40];
    test_tokens(in, 40, info.n_vocab, 7);

    fg_session_params sp = {.weight = 1, .name = "s1", .tenant_name = "acme"};
    fg_session_t *s = NULL;
    CHECK(fg_session_create(e, &sp, &s) == FG_OK);
    snprintf(path, sizeof path, "%s/acme/s1.fgs", root);
    CHECK(turn(s, in, 20, false) == FG_OK);
    fg_diag d = {{0}};
    CHECK(fg_session_save(s, &d) == FG_OK || access(path, F_OK) == 0); /* waits for the writer */
    CHECK_MSG(access(path, F_OK) == 0, "the file after an allowed save");
    CHECK(atomic_load(&asked) >= 1 && strcmp(asked_for, "acme/s1") == 0);
    char *before = NULL, *after = NULL;
    size_t n_before = 0, n_after = 0;
    CHECK(read_all(path, &before, &n_before));

    /* Refused: a completed response's save fails, the file stays as it was. */
    atomic_store(&allow, false);
    fg_err save = turn(s, in + 20, 10, true);
    CHECK_MSG(save == FG_ERR_STATE, "SAVE_FAILED after a refused write: %s", fg_err_name(save));
    CHECK(fg_session_save(s, &d) == FG_ERR_STATE);
    CHECK(read_all(path, &after, &n_after) && n_after == n_before && memcmp(before, after, n_before) == 0);
    free(after);
    CHECK(atomic_load(&refused) >= 2);

    /* Allowed again: written. */
    atomic_store(&allow, true);
    CHECK(fg_session_save(s, &d) == FG_OK);
    CHECK(read_all(path, &after, &n_after) && n_after > n_before);
    free(after);

    /* A delete while refused leaves the file (another instance's now). */
    atomic_store(&allow, false);
    fg_session_delete(s);
    fg_engine_close(e); /* the writer's queue is done when it returns */
    CHECK_MSG(access(path, F_OK) == 0, "a refused delete keeps the file");
    free(before);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    fprintf(stderr, "test_persist_fence: fence asked %d times, refused %d\n", atomic_load(&asked),
            atomic_load(&refused));
    return fg_test_failures ? 1 : 0;
}

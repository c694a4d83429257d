/* test_session_meta.c: the gateway's session record (gateway/session_meta.h).
 *
 * - a record decodes into exactly the settings, counters and tokens encoded;
 * - the tail (what the conversation leaves open) round-trips, one past the last is refused;
 * - a conversation too big for the buffer is left out (conv_known false),
 *   the settings still fit; settings that cannot fit are an error;
 * - every truncation and every single-bit flip either decodes or fails with
 *   an error, never reads past the buffer (ASan) or leaks;
 * - another record version is FG_ERR_UNSUPPORTED, not a parse.
 */
#include <string.h>

#include "gateway/session_meta.h"
#include "tests/unit/fg_test.h"

static void fill(fg_session_meta *m, int32_t *toks, size_t n)
{
    memset(m, 0, sizeof *m);
    strcpy(m->tenant, "acme-1");
    m->instructions = "You are a careful agent. \xc3\xa9";
    m->instructions_len = strlen(m->instructions);
    m->temperature = 0.7;
    m->top_p = 0.95;
    m->min_p = 0.05;
    m->top_k = 40;
    m->has_seed = true;
    m->seed = 0xfedcba9876543210ull;
    m->max_output_tokens = 300;
    m->n_stop = 2;
    strcpy(m->stop[0], "</tool>");
    strcpy(m->stop[1], "\n\n");
    m->next_seq = 1234;
    m->evt_counter = 1300;
    m->item_counter = 17;
    m->resp_counter = 9;
    m->cached_tokens = 777;
    m->conv_known = true;
    m->tail = FG_TEMPLATE_TAIL_CALLS;
    for (size_t i = 0; i < n; i++)
        toks[i] = (int32_t)((i * 2654435761u) % 200000u);
    m->conv = (fg_tokens){toks, n, n};
}

static void test_round_trip(void)
{
    static int32_t toks[5000];
    static uint8_t buf[FG_SESSION_META_MAX_BYTES];
    fg_session_meta m, out;
    fill(&m, toks, 5000);
    size_t len;
    fg_diag d;
    CHECK(fg_session_meta_encode(&m, buf, sizeof buf, &len, &d) == FG_OK);
    CHECK(fg_session_meta_decode(buf, len, &out, &d) == FG_OK);
    CHECK(!strcmp(out.tenant, "acme-1"));
    CHECK(out.instructions_len == m.instructions_len && !memcmp(out.instructions, m.instructions, m.instructions_len));
    CHECK(out.temperature == 0.7 && out.top_p == 0.95 && out.min_p == 0.05 && out.top_k == 40);
    CHECK(out.has_seed && out.seed == m.seed && out.max_output_tokens == 300);
    CHECK(out.n_stop == 2 && !strcmp(out.stop[0], "</tool>") && !strcmp(out.stop[1], "\n\n"));
    CHECK(out.next_seq == 1234 && out.evt_counter == 1300 && out.item_counter == 17 && out.resp_counter == 9);
    CHECK(out.cached_tokens == 777 && !out.rebuild);
    CHECK(out.conv_known && out.conv.n == 5000 && !memcmp(out.conv.v, toks, sizeof toks));
    CHECK(out.tail == FG_TEMPLATE_TAIL_CALLS);
    fg_session_meta_free(&out);
    for (int t = 0; t <= FG_TEMPLATE_TAIL_MAX; t++) { /* every tail, as written */
        m.tail = (fg_template_tail)t;
        CHECK(fg_session_meta_encode(&m, buf, sizeof buf, &len, &d) == FG_OK);
        CHECK(fg_session_meta_decode(buf, len, &out, &d) == FG_OK && (int)out.tail == t);
        fg_session_meta_free(&out);
    }
    m.tail = (fg_template_tail)(FG_TEMPLATE_TAIL_MAX + 1);
    CHECK(fg_session_meta_encode(&m, buf, sizeof buf, &len, &d) == FG_ERR_INVALID_ARG);
}

static void test_too_big(void)
{
    static int32_t toks[40000];
    static uint8_t buf[FG_SESSION_META_MAX_BYTES];
    fg_session_meta m, out;
    fill(&m, toks, 40000); /* ~3 bytes per token: more than 64 KiB */
    size_t len;
    fg_diag d;
    CHECK(fg_session_meta_encode(&m, buf, sizeof buf, &len, &d) == FG_OK);
    CHECK(len < 1024);
    CHECK(fg_session_meta_decode(buf, len, &out, &d) == FG_OK);
    CHECK(!out.conv_known && out.conv.n == 0 && out.next_seq == 1234);
    fg_session_meta_free(&out);
    /* settings alone above the cap */
    CHECK(fg_session_meta_encode(&m, buf, 64, &len, &d) == FG_ERR_INVALID_ARG);
    strcpy(m.tenant, "bad tenant");
    CHECK(fg_session_meta_encode(&m, buf, sizeof buf, &len, &d) == FG_ERR_INVALID_ARG);
}

static void test_damage(void)
{
    static int32_t toks[300];
    uint8_t buf[4096], copy[4096];
    fg_session_meta m, out;
    fill(&m, toks, 300);
    size_t len;
    fg_diag d;
    CHECK(fg_session_meta_encode(&m, buf, sizeof buf, &len, &d) == FG_OK);
    for (size_t n = 0; n < len; n++) { /* every truncation fails */
        uint8_t *p = malloc(n ? n : 1); /* exact size, so ASan sees a read past it */
        memcpy(p, buf, n);
        fg_err e = fg_session_meta_decode(p, n, &out, &d);
        CHECK_MSG(e != FG_OK, "a record cut to %zu of %zu bytes decoded", n, len);
        free(p);
    }
    int decoded = 0;
    for (size_t bit = 0; bit < len * 8; bit++) { /* every bit flip: an error or a valid record */
        memcpy(copy, buf, len);
        copy[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        if (fg_session_meta_decode(copy, len, &out, &d) == FG_OK) {
            decoded++;
            fg_session_meta_free(&out);
        }
    }
    CHECK(decoded > 0 && decoded < (int)(len * 8)); /* flips in values decode, flips in structure do not */
    memcpy(copy, buf, len);
    copy[6] |= 7u << 3; /* flags bits 3..5: a tail past the last */
    CHECK(fg_session_meta_decode(copy, len, &out, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "tail") != NULL);
    memcpy(copy, buf, len);
    copy[4] = 2; /* version 2 */
    CHECK(fg_session_meta_decode(copy, len, &out, &d) == FG_ERR_UNSUPPORTED);
    CHECK(strstr(d.msg, "version 2") != NULL);
}

int main(void)
{
    test_round_trip();
    test_too_big();
    test_damage();
    return TEST_DONE("test_session_meta");
}

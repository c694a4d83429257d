/* test_gw_ring.c: the gateway's event FIFO (gateway/gw_ring.c).
 *
 * - FIFO order and every event's bytes intact (headroom, JSON, NUL) through
 *   pushes and drops of random sizes that wrap the circular buffer and make it
 *   grow, checked against a model of what should be there;
 * - the token path allocates nothing: once a streaming pattern (push a delta,
 *   drop the oldest past a window) has run for a while, a long run of the same
 *   pattern leaves the buffer, its capacity and the grow count unchanged;
 * - an emptied ring gives a big buffer back.
 */
#include "tests/unit/fg_test.h"

#include "gateway/gateway_internal.h"

/* The text of event k: its number repeated to a length from the size table. */
static size_t make_event(uint64_t k, size_t len, char *out)
{
    for (size_t i = 0; i < len; i++)
        out[i] = (char)('a' + (k + i) % 26);
    out[len] = 0;
    return len;
}

static bool event_ok(const gw_event *e, uint64_t k, size_t len)
{
    char want[70000];
    make_event(k, len, want);
    return e->seq == k && e->len == len && memcmp(e->buf + LWS_PRE, want, len) == 0 && e->buf[LWS_PRE + len] == 0;
}

static void test_fifo_random(void)
{
    gw_ring r = {0};
    static char text[70000];
    size_t lens[4096];
    uint64_t next = 1, oldest = 1;
    rng_seed(7);
    for (int step = 0; step < 200000; step++) {
        const bool push = r.count == 0 || (rng_u32() % 100) < 52;
        if (push && r.count < 4000) {
            uint32_t x = rng_u32() % 1000;
            size_t len = x < 900 ? rng_u32() % 200 : x < 995 ? rng_u32() % 5000 : rng_u32() % 65536;
            make_event(next, len, text);
            CHECK(gw_ring_push(&r, next, text, len));
            lens[next % 4096] = len;
            next++;
        } else if (r.count) {
            const gw_event *e = gw_ring_at(&r, 0);
            CHECK_MSG(event_ok(e, oldest, lens[oldest % 4096]), "event %llu at step %d", (unsigned long long)oldest,
                      step);
            gw_ring_drop_oldest(&r);
            oldest++;
        }
        if (step % 9973 == 0) /* every live event, not only the oldest */
            for (uint32_t i = 0; i < r.count; i++)
                CHECK(event_ok(gw_ring_at(&r, i), oldest + i, lens[(oldest + i) % 4096]));
    }
    size_t bytes = 0;
    for (uint32_t i = 0; i < r.count; i++)
        bytes += gw_ring_at(&r, i)->len;
    CHECK(bytes == r.bytes);
    gw_ring_free(&r);
}

static void test_no_allocation_when_streaming(void)
{
    gw_ring r = {0};
    char text[256];
    uint64_t seq = 1;
    /* a response's deltas, 20..120 bytes each, the newest 64 kept (a resume window) */
    for (int warm = 0; warm < 2000; warm++) {
        size_t len = 20 + (size_t)(rng_u32() % 100);
        CHECK(gw_ring_push(&r, seq, text, make_event(seq, len, text)));
        seq++;
        if (r.count > 64)
            gw_ring_drop_oldest(&r);
    }
    const char *data = r.data;
    const gw_event *ev = r.ev;
    const size_t cap = r.data_cap;
    const uint64_t grows = r.grows;
    for (int i = 0; i < 1000000; i++) {
        size_t len = 20 + (size_t)(rng_u32() % 100);
        if (!gw_ring_push(&r, seq, text, make_event(seq, len, text)))
            CHECK(!"push failed");
        seq++;
        if (r.count > 64)
            gw_ring_drop_oldest(&r);
    }
    CHECK_MSG(r.grows == grows && r.data == data && r.data_cap == cap && r.ev == ev,
              "a million events in the steady state reallocated the ring: grows %llu -> %llu, cap %zu -> %zu",
              (unsigned long long)grows, (unsigned long long)r.grows, cap, r.data_cap);
    CHECK(r.count == 64 && event_ok(gw_ring_at(&r, 63), seq - 1, gw_ring_at(&r, 63)->len));
    gw_ring_free(&r);
}

static void test_idle_gives_back(void)
{
    gw_ring r = {0};
    static char text[100000];
    memset(text, 'x', sizeof text);
    for (int i = 0; i < 8; i++)
        CHECK(gw_ring_push(&r, (uint64_t)i + 1, text, sizeof text - 1));
    CHECK(r.data_cap >= 8 * (sizeof text - 1));
    while (r.count)
        gw_ring_drop_oldest(&r);
    CHECK(r.data == NULL && r.data_cap == 0);
    CHECK(gw_ring_push(&r, 9, "{}", 2) && r.data_cap <= 4096);
    gw_ring_free(&r);
}

int main(void)
{
    test_fifo_random();
    test_no_allocation_when_streaming();
    test_idle_gives_back();
    return TEST_DONE("test_gw_ring");
}

/* client_stats.c: log-linear latency histograms (see client_stats.h).
 *
 * Bucket b < 64 holds the value b. Above, a value v with its highest set bit
 * at position e (e >= 6) goes to 64 * (e - 5) + the 6 bits below that top
 * bit, so each power-of-two range [2^e, 2^(e+1)) is cut into 64 equal parts.
 */
#include "gateway/client_stats.h"

#include <math.h>
#include <string.h>

void fg_client_hist_init(fg_client_hist *h)
{
    memset(h, 0, sizeof *h);
}

unsigned fg_client_hist_bucket(uint64_t us)
{
    if (us < FG_CLIENT_HIST_SUB)
        return (unsigned)us;
    unsigned e = 63u - (unsigned)__builtin_clzll(us); /* >= 6 */
    unsigned b = FG_CLIENT_HIST_SUB * (e - 5) + (unsigned)((us >> (e - 6)) & (FG_CLIENT_HIST_SUB - 1));
    return b < FG_CLIENT_HIST_BUCKETS ? b : FG_CLIENT_HIST_BUCKETS - 1;
}

uint64_t fg_client_hist_bucket_low(unsigned b)
{
    if (b < FG_CLIENT_HIST_SUB)
        return b;
    unsigned e = b / FG_CLIENT_HIST_SUB + 5;
    uint64_t sub = b % FG_CLIENT_HIST_SUB;
    return (UINT64_C(1) << e) | (sub << (e - 6));
}

/* One past the largest value of bucket b. */
static uint64_t bucket_high(unsigned b)
{
    if (b < FG_CLIENT_HIST_SUB)
        return (uint64_t)b + 1;
    unsigned e = b / FG_CLIENT_HIST_SUB + 5;
    return fg_client_hist_bucket_low(b) + (UINT64_C(1) << (e - 6));
}

void fg_client_hist_record(fg_client_hist *h, uint64_t us)
{
    if (!h->count || us < h->min_us)
        h->min_us = us;
    if (us > h->max_us)
        h->max_us = us;
    h->count++;
    h->sum_us += us;
    h->buckets[fg_client_hist_bucket(us)]++;
}

void fg_client_hist_merge(fg_client_hist *dst, const fg_client_hist *src)
{
    if (!src->count)
        return;
    if (!dst->count || src->min_us < dst->min_us)
        dst->min_us = src->min_us;
    if (src->max_us > dst->max_us)
        dst->max_us = src->max_us;
    dst->count += src->count;
    dst->sum_us += src->sum_us;
    for (unsigned i = 0; i < FG_CLIENT_HIST_BUCKETS; i++)
        dst->buckets[i] += src->buckets[i];
}

uint64_t fg_client_hist_percentile(const fg_client_hist *h, double p)
{
    if (!h->count)
        return 0;
    if (p <= 0)
        return h->min_us;
    if (p >= 100)
        return h->max_us;
    uint64_t rank = (uint64_t)ceil(p / 100.0 * (double)h->count);
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (unsigned b = 0; b < FG_CLIENT_HIST_BUCKETS; b++) {
        seen += h->buckets[b];
        if (seen < rank)
            continue;
        uint64_t lo = fg_client_hist_bucket_low(b), hi = bucket_high(b);
        uint64_t v = lo + (hi - 1 - lo) / 2;
        if (v < h->min_us)
            v = h->min_us;
        if (v > h->max_us)
            v = h->max_us;
        return v;
    }
    return h->max_us;
}

double fg_client_hist_mean(const fg_client_hist *h)
{
    return h->count ? (double)h->sum_us / (double)h->count : 0.0;
}

/* client_stats.h: latency histograms for flashgate-cli's load mode.
 *
 * A log-linear histogram of non-negative durations in microseconds: exact
 * below 64 us, then 64 buckets per power of two, so a percentile is off by at
 * most 1/64 (1.6 %) of the value. Memory is fixed (about 20 KiB) however many
 * samples are recorded, which matters when 10,000 sessions stream tokens.
 *
 * Threads: no global state; one histogram is touched by one thread at a time.
 */
#ifndef FG_GATEWAY_CLIENT_STATS_H
#define FG_GATEWAY_CLIENT_STATS_H

#include <stdint.h>

#define FG_CLIENT_HIST_SUB 64        /* buckets per power of two (and the exact range) */
#define FG_CLIENT_HIST_EXP 38        /* powers of two above the exact range: up to 2^44 us (~200 days) */
#define FG_CLIENT_HIST_BUCKETS (FG_CLIENT_HIST_SUB * (FG_CLIENT_HIST_EXP + 1))

typedef struct fg_client_hist {
    uint64_t count;
    uint64_t sum_us;                 /* for the mean */
    uint64_t min_us, max_us;         /* exact extremes */
    uint64_t buckets[FG_CLIENT_HIST_BUCKETS];
} fg_client_hist;

void fg_client_hist_init(fg_client_hist *h);
/* Records one duration (us); values past the last bucket land in it. */
void fg_client_hist_record(fg_client_hist *h, uint64_t us);
/* Adds every sample of src to dst. */
void fg_client_hist_merge(fg_client_hist *dst, const fg_client_hist *src);
/* The p-th percentile (0 < p <= 100) by nearest rank: the smallest recorded
 * value v such that at least ceil(p/100 * count) samples are <= v, to within
 * a bucket (the bucket's midpoint, clamped to [min, max]). 0 when empty. */
uint64_t fg_client_hist_percentile(const fg_client_hist *h, double p);
/* The mean in us; 0 when empty. */
double fg_client_hist_mean(const fg_client_hist *h);

/* Bucket index of a value, and the smallest value of a bucket (exposed for tests). */
unsigned fg_client_hist_bucket(uint64_t us);
uint64_t fg_client_hist_bucket_low(unsigned b);

#endif

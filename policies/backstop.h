/* backstop.h: the local fail-open limiter of one tenant on one instance.
 *
 * While Redis is unreachable, a tenant that fails open is admitted against
 * this instance's share of its limits: tokens per minute divided by the
 * expected instance count (a GCRA on this machine's monotonic clock), and
 * the share of the daily budget Redis last said was left. Concurrency shares
 * are counted by the quota thread from the leases it holds.
 *
 * Thread safety: owned by the quota thread.
 */
#ifndef FG_BACKSTOP_H
#define FG_BACKSTOP_H

#include <stdint.h>

#include "policies/quota.h"

typedef struct fg_backstop {
    int64_t tat_us;      /* GCRA theoretical arrival time, microseconds of CLOCK_MONOTONIC;
                            the local bucket is full when tat_us <= now */
    int64_t day;         /* UTC day (days since the epoch) daily_left counts for; -1: none yet */
    int64_t daily_left;  /* tokens this instance may still admit locally that day */
} fg_backstop;

void fg_backstop_init(fg_backstop *b);

/* This instance's share of a limit: ceil(limit / instances); 0 stays 0 (unlimited). */
int64_t fg_backstop_share(int64_t limit, int instances);

/* Records what Redis last said of the daily budget: used of limit tokens on day. */
void fg_backstop_note_daily(fg_backstop *b, const fg_tenant_limits *l, int instances, int64_t day,
                            int64_t used);

/* Admits cost tokens against the local share of tokens per minute and of the
 * daily budget, at now_us (CLOCK_MONOTONIC) on UTC day `day`, to_midnight_s
 * seconds before that day ends. Returns
 * FG_QUOTA_OK (charged), FG_QUOTA_TOKENS_PER_MINUTE or FG_QUOTA_DAILY_TOKENS;
 * fills r's retry_after and states (r->verdict is left to the caller). */
fg_quota_verdict fg_backstop_admit(fg_backstop *b, const fg_tenant_limits *l, int instances,
                                   int64_t cost, int64_t now_us, int64_t day, double to_midnight_s,
                                   fg_quota_result *r);

/* Settles a locally admitted reservation: returns reserved - used tokens
 * (tat never below now_us, the daily share never above what it was). */
void fg_backstop_settle(fg_backstop *b, const fg_tenant_limits *l, int instances, int64_t reserved,
                        int64_t used, int64_t now_us);

#endif

/* backstop.c: the local fail-open limiter (see backstop.h).
 *
 * The same GCRA as the reserve script, with this instance's share of the
 * rate: interval = 60e6 / share microseconds per token, burst one minute.
 */
#include "policies/backstop.h"

#include <math.h>
#include <string.h>

#define BURST_US 60000000.0 /* a full minute of tokens may be taken at once */

void fg_backstop_init(fg_backstop *b)
{
    memset(b, 0, sizeof *b);
    b->day = -1;
}

int64_t fg_backstop_share(int64_t limit, int instances)
{
    if (limit <= 0)
        return 0;
    if (instances < 1)
        instances = 1;
    return (limit + instances - 1) / instances;
}

void fg_backstop_note_daily(fg_backstop *b, const fg_tenant_limits *l, int instances, int64_t day,
                            int64_t used)
{
    if (l->daily_tokens <= 0)
        return;
    int64_t left = l->daily_tokens - used;
    b->day = day;
    b->daily_left = left > 0 ? fg_backstop_share(left, instances) : 0;
}

fg_quota_verdict fg_backstop_admit(fg_backstop *b, const fg_tenant_limits *l, int instances,
                                   int64_t cost, int64_t now_us, int64_t day, double to_midnight_s,
                                   fg_quota_result *r)
{
    int64_t rate = fg_backstop_share(l->tokens_per_minute, instances); /* tokens per minute */
    double interval = rate > 0 ? 60e6 / (double)rate : 0;              /* us per token */
    double tat = (double)(b->tat_us > now_us ? b->tat_us : now_us);

    if (l->daily_tokens > 0 && b->day != day) {
        /* Nothing heard from Redis about this day: a fresh share. */
        b->day = day;
        b->daily_left = fg_backstop_share(l->daily_tokens, instances);
    }

    fg_quota_verdict v = FG_QUOTA_OK;
    r->retry_after = 0;
    if (rate > 0 && tat + (double)cost * interval - (double)now_us > BURST_US + 1) {
        v = FG_QUOTA_TOKENS_PER_MINUTE;
        if (cost <= rate)
            r->retry_after = (tat + (double)cost * interval - BURST_US - (double)now_us) / 1e6;
    } else if (l->daily_tokens > 0 && cost > b->daily_left) {
        v = FG_QUOTA_DAILY_TOKENS;
        r->retry_after = to_midnight_s;
    }
    if (v == FG_QUOTA_OK) {
        if (rate > 0) {
            tat += (double)cost * interval;
            b->tat_us = (int64_t)tat;
        }
        if (l->daily_tokens > 0)
            b->daily_left -= cost;
    }

    r->n_states = 0;
    if (rate > 0) {
        fg_quota_limit_state *s = &r->states[r->n_states++];
        double ahead = tat - (double)now_us; /* us of tokens taken, not yet refilled */
        s->name = "tokens_per_minute";
        s->limit = rate;
        s->remaining = (int64_t)floor((BURST_US - ahead) / interval);
        if (s->remaining < 0)
            s->remaining = 0;
        s->reset_seconds = ahead / 1e6;
    }
    if (l->daily_tokens > 0) {
        fg_quota_limit_state *s = &r->states[r->n_states++];
        s->name = "daily_tokens";
        s->limit = fg_backstop_share(l->daily_tokens, instances);
        s->remaining = b->daily_left > 0 ? b->daily_left : 0;
        s->reset_seconds = to_midnight_s;
    }
    return v;
}

void fg_backstop_settle(fg_backstop *b, const fg_tenant_limits *l, int instances, int64_t reserved,
                        int64_t used, int64_t now_us)
{
    int64_t delta = used - reserved; /* tokens; negative: a refund */
    int64_t rate = fg_backstop_share(l->tokens_per_minute, instances);
    if (rate > 0 && delta != 0) {
        double tat = (double)(b->tat_us > now_us ? b->tat_us : now_us);
        tat += (double)delta * 60e6 / (double)rate;
        b->tat_us = tat > (double)now_us ? (int64_t)tat : now_us;
    }
    if (l->daily_tokens > 0 && b->day >= 0)
        b->daily_left -= delta;
}

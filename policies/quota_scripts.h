/* quota_scripts.h: the Lua scripts the quota thread runs on Redis.
 *
 * Every script that needs the time reads it with TIME (Redis's clock, so all
 * gateways agree), touches only the KEYS it is given (all in one tenant's hash slot, or
 * all under the {flashgate:instances} tag: Redis Cluster safe), and is loaded once per connection with SCRIPT LOAD and
 * then called with EVALSHA (EVAL of the source on a NOSCRIPT reply).
 * quota_scripts.c documents each script's KEYS, ARGV and reply, with units.
 *
 * Verdict numbers in replies are the values of fg_quota_verdict (checked at
 * compile time in quota_scripts.c).
 */
#ifndef FG_QUOTA_SCRIPTS_H
#define FG_QUOTA_SCRIPTS_H

typedef enum fg_qscript_id {
    FG_QSCRIPT_SESSION,  /* take (or keep) a session lease */
    FG_QSCRIPT_RESERVE,  /* response lease + token reservation */
    FG_QSCRIPT_SETTLE,   /* settle a reservation to actual usage, drop the lease */
    FG_QSCRIPT_RENEW,    /* renew many leases of one tenant */
    FG_QSCRIPT_REPLAY,   /* apply journaled fail-open usage, idempotently */
    FG_QSCRIPT_USAGE,    /* read a tenant's live usage */
    FG_QSCRIPT_CREATE,   /* write a tenant's record only if it has none */
    FG_QSCRIPT_DIR_CLAIM,   /* session directory: look up or take a session's lease */
    FG_QSCRIPT_DIR_RENEW,   /* session directory: renew many leases of one tenant */
    FG_QSCRIPT_DIR_RELEASE, /* session directory: give a lease back */
    FG_QSCRIPT_DIR_PUBLISH, /* cluster view: publish this instance's load, read every live one's */
    FG_QSCRIPT__COUNT
} fg_qscript_id;

/* Lua source and a short name ("reserve") of a script. */
const char *fg_qscript_source(fg_qscript_id id);
const char *fg_qscript_name(fg_qscript_id id);

/* Reply of the reserve script: an array of integers in this order. */
enum {
    FG_QRES_VERDICT,        /* fg_quota_verdict, or -1: ARGV day guess too far from Redis's day */
    FG_QRES_RETRY_MS,       /* ms until a retry can succeed (0: none will) */
    FG_QRES_NOW_MS,         /* Redis TIME, ms since the epoch */
    FG_QRES_DAY,            /* Redis's UTC day, days since the epoch */
    FG_QRES_TPM_LIMIT,      /* tokens per minute (0: unlimited) */
    FG_QRES_TPM_REMAINING,  /* tokens that could be reserved now */
    FG_QRES_TPM_RESET_MS,   /* ms until the bucket is full again */
    FG_QRES_DAILY_LIMIT,    /* tokens per UTC day (0: unlimited) */
    FG_QRES_DAILY_USED,     /* tokens counted today, this reservation included */
    FG_QRES_DAILY_RESET_MS, /* ms until the next UTC midnight */
    FG_QRES_RESP_LIMIT,     /* concurrent responses (0: unlimited) */
    FG_QRES_RESP_ACTIVE,    /* live response leases, this one included */
    FG_QRES__COUNT
};

#endif

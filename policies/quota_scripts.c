/* quota_scripts.c: the Lua sources of the quota scripts (see quota_scripts.h).
 *
 * Units used throughout:
 *   now_us   Redis TIME in microseconds since the epoch
 *   now_ms   the same in milliseconds (lease expiries are in ms)
 *   day      UTC day of Redis TIME, days since the epoch; the daily counter
 *            of day d is "{tenant:ID}:daily:<YYYYMMDD of d>"
 *   tat      GCRA theoretical arrival time, microseconds of Redis TIME;
 *            the bucket is full when tat <= now_us
 *   interval GCRA emission interval, microseconds per token = 60e6 / tokens_per_minute
 *   burst    60e6 microseconds: a full minute of tokens may be taken at once
 *
 * Every number handed to redis.call() goes through fmt() ("%.0f"), because
 * Lua's own number-to-string conversion keeps only 14 significant digits and
 * microsecond timestamps have 16.
 */
#include "policies/quota_scripts.h"

#include "policies/quota.h"

_Static_assert(FG_QUOTA_OK == 0 && FG_QUOTA_SESSIONS == 1 && FG_QUOTA_RESPONSES == 2 &&
                   FG_QUOTA_TOKENS_PER_MINUTE == 3 && FG_QUOTA_DAILY_TOKENS == 4 &&
                   FG_QUOTA_KV_BYTES == 5 && FG_QUOTA_CONTEXT == 6 && FG_QUOTA_OUTPUT == 7 &&
                   FG_QUOTA_UNKNOWN_TENANT == 9,
               "the scripts below hard-code these verdict numbers");

/* Common first lines: the clock and the number formatter. */
#define PRELUDE                                                                  \
    "local t = redis.call('TIME')\n"                                             \
    "local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"                 \
    "local now_ms = math.floor(now_us / 1000)\n"                                 \
    "local day = math.floor(tonumber(t[1]) / 86400)\n"                           \
    "local function fmt(x) return string.format('%.0f', x) end\n"

/* session: take a session lease, or renew it if this member holds one.
 *   KEYS[1] {tenant:ID}:config    hash (max_sessions)
 *   KEYS[2] {tenant:ID}:sessions  zset member -> lease expiry, ms of Redis TIME
 *   ARGV[1] member                "<instance>:<session id>"
 *   ARGV[2] lease ttl, ms
 * Reply: {verdict, retry_ms, now_ms, max_sessions, active sessions}.
 * Expired leases are removed first, so a crashed gateway's sessions stop
 * counting lease_ttl after its last renewal. */
static const char SESSION[] = PRELUDE
    "if redis.call('EXISTS', KEYS[1]) == 0 then return {9, 0, now_ms, 0, 0} end\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. fmt(now_ms))\n"
    "local max = tonumber(redis.call('HGET', KEYS[1], 'max_sessions')) or 0\n"
    "local active = redis.call('ZCARD', KEYS[2])\n"
    "if max > 0 and active >= max and not redis.call('ZSCORE', KEYS[2], ARGV[1]) then\n"
    "  return {1, 1000, now_ms, max, active}\n"
    "end\n"
    "redis.call('ZADD', KEYS[2], fmt(now_ms + tonumber(ARGV[2])), ARGV[1])\n"
    "return {0, 0, now_ms, max, redis.call('ZCARD', KEYS[2])}\n";

/* reserve: at response.create, one call that checks every limit and, when
 * all pass, takes the response lease and charges the reservation.
 *   KEYS[1] {tenant:ID}:config     hash of limits
 *   KEYS[2] {tenant:ID}:responses  zset member -> lease expiry, ms; entries
 *           stay 24 h after expiry (only ZCOUNT now..+inf counts as live), so
 *           settle can tell a reservation it already settled (see settle)
 *   KEYS[3] {tenant:ID}:tpm        string: tat, microseconds of Redis TIME
 *   KEYS[4..6] {tenant:ID}:daily:<day> for days ARGV[7]-1, ARGV[7], ARGV[7]+1
 *           (tokens counted that UTC day; the script uses the one of its day)
 *   ARGV[1] member                 "<instance>:<response key>"
 *   ARGV[2] cost, tokens           prompt + max output
 *   ARGV[3] resident KV, bytes     checked against max_kv_bytes
 *   ARGV[4] context, tokens        session length after this response at most
 *   ARGV[5] max output, tokens     checked against max_output_tokens
 *   ARGV[6] lease ttl, ms
 *   ARGV[7] day guess, days since the epoch (the caller's estimate of Redis's day)
 * Reply: integers in the order of FG_QRES_* (quota_scripts.h); verdict -1
 * when Redis's day is not within one day of the guess (nothing changed).
 * Checks, in order: max output, max context, KV bytes, concurrent responses,
 * GCRA (allowed while tat + cost * interval - now_us <= burst), daily budget. */
static const char RESERVE[] = PRELUDE
    "local idx = 5 + day - tonumber(ARGV[7])\n"
    "if idx < 4 or idx > 6 then return {-1, 0, now_ms, day} end\n"
    "local dkey = KEYS[idx]\n"
    "if redis.call('EXISTS', KEYS[1]) == 0 then return {9, 0, now_ms, day} end\n"
    "local c = redis.call('HMGET', KEYS[1], 'max_responses', 'tokens_per_minute', 'daily_tokens',\n"
    "                     'max_kv_bytes', 'max_context_tokens', 'max_output_tokens')\n"
    "local max_resp = tonumber(c[1]) or 0\n"
    "local tpm = tonumber(c[2]) or 0\n"
    "local daily = tonumber(c[3]) or 0\n"
    "local max_kv = tonumber(c[4]) or 0\n"
    "local max_ctx = tonumber(c[5]) or 0\n"
    "local max_out = tonumber(c[6]) or 0\n"
    "local cost = tonumber(ARGV[2])\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', fmt(now_ms - 86400000))\n"
    "local active = redis.call('ZCOUNT', KEYS[2], fmt(now_ms), '+inf')\n"
    "local tat = tonumber(redis.call('GET', KEYS[3])) or now_us\n"
    "if tat < now_us then tat = now_us end\n"
    "local interval = 0\n"
    "if tpm > 0 then interval = 60000000 / tpm end\n"
    "local used = tonumber(redis.call('GET', dkey)) or 0\n"
    "local midnight_ms = (day + 1) * 86400000 - now_ms\n"
    "local verdict, retry_ms = 0, 0\n"
    "if max_out > 0 and tonumber(ARGV[5]) > max_out then verdict = 7\n"
    "elseif max_ctx > 0 and tonumber(ARGV[4]) > max_ctx then verdict = 6\n"
    "elseif max_kv > 0 and tonumber(ARGV[3]) > max_kv then verdict, retry_ms = 5, 1000\n"
    "elseif max_resp > 0 and active >= max_resp then verdict, retry_ms = 2, 1000\n"
    "elseif tpm > 0 and tat + cost * interval - now_us > 60000001 then\n"
    "  verdict = 3\n"
    "  if cost <= tpm then retry_ms = math.ceil((tat + cost * interval - 60000000 - now_us) / 1000) end\n"
    "elseif daily > 0 and used + cost > daily then verdict, retry_ms = 4, midnight_ms\n"
    "end\n"
    "if verdict == 0 then\n"
    "  redis.call('ZADD', KEYS[2], fmt(now_ms + tonumber(ARGV[6])), ARGV[1])\n"
    "  active = active + 1\n"
    "  if tpm > 0 and cost > 0 then\n"
    "    tat = tat + cost * interval\n"
    "    redis.call('SET', KEYS[3], fmt(tat), 'PX', fmt(math.ceil((tat - now_us) / 1000) + 1000))\n"
    "  end\n"
    "  if cost > 0 then\n"
    "    used = redis.call('INCRBY', dkey, fmt(cost))\n"
    "    if redis.call('TTL', dkey) < 0 then redis.call('EXPIRE', dkey, 172800) end\n"
    "  end\n"
    "end\n"
    "local tpm_left, tpm_reset = 0, 0\n"
    "if tpm > 0 then\n"
    "  tpm_left = math.max(0, math.floor((60000000 - (tat - now_us)) / interval))\n"
    "  tpm_reset = math.ceil((tat - now_us) / 1000)\n"
    "end\n"
    "return {verdict, retry_ms, now_ms, day, tpm, tpm_left, tpm_reset, daily, used, midnight_ms,\n"
    "        max_resp, active}\n";

/* settle: at response.done, settles a reservation to the tokens actually used.
 *   KEYS[1] {tenant:ID}:config      hash (tokens_per_minute)
 *   KEYS[2] {tenant:ID}:responses   zset of leases (see reserve)
 *   KEYS[3] {tenant:ID}:tpm         tat, microseconds of Redis TIME
 *   KEYS[4] {tenant:ID}:daily:<d>   the counter of the day the reservation was charged to
 *   KEYS[5] {tenant:ID}:usage:total lifetime tokens used
 *   ARGV[1] member                  the lease reserve took
 *   ARGV[2] reserved, tokens        what reserve charged
 *   ARGV[3] used, tokens            prompt + generated, actually
 * Reply: 1 settled, 0 already settled (no lease entry: nothing changes).
 * Removing the lease entry is the guard that makes a retried or replayed
 * settle count once. The difference used - reserved moves tat (a refund
 * never takes tat below now: an idle bucket holds at most a minute of
 * tokens) and the day's counter (never below 0). */
static const char SETTLE[] = PRELUDE
    "if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 0 end\n"
    "local reserved = tonumber(ARGV[2])\n"
    "local used = tonumber(ARGV[3])\n"
    "local delta = used - reserved\n"
    "if delta ~= 0 then\n"
    "  local tpm = tonumber(redis.call('HGET', KEYS[1], 'tokens_per_minute')) or 0\n"
    "  if tpm > 0 then\n"
    "    local tat = tonumber(redis.call('GET', KEYS[3])) or now_us\n"
    "    if tat < now_us then tat = now_us end\n"
    "    tat = tat + delta * (60000000 / tpm)\n"
    "    if tat > now_us then\n"
    "      redis.call('SET', KEYS[3], fmt(tat), 'PX', fmt(math.ceil((tat - now_us) / 1000) + 1000))\n"
    "    else\n"
    "      redis.call('DEL', KEYS[3])\n"
    "    end\n"
    "  end\n"
    "  if redis.call('INCRBY', KEYS[4], fmt(delta)) < 0 then redis.call('SET', KEYS[4], '0', 'KEEPTTL') end\n"
    "  if redis.call('TTL', KEYS[4]) < 0 then redis.call('EXPIRE', KEYS[4], 172800) end\n"
    "end\n"
    "if used > 0 then redis.call('INCRBY', KEYS[5], fmt(used)) end\n"
    "return 1\n";

/* renew: extends every lease one instance holds for one tenant, in one call.
 *   KEYS[1] {tenant:ID}:sessions   zset member -> expiry, ms
 *   KEYS[2] {tenant:ID}:responses  zset member -> expiry, ms
 *   ARGV[1] lease ttl, ms
 *   ARGV[2] n: how many of the members that follow are sessions
 *   ARGV[3 .. 2+n] session members, ARGV[3+n ..] response members
 * Reply: the number of leases renewed. A lease that expired while Redis was
 * unreachable is added again: the session or response is still running. */
static const char RENEW[] = PRELUDE
    "local exp = fmt(now_ms + tonumber(ARGV[1]))\n"
    "local n = tonumber(ARGV[2])\n"
    "for i = 3, #ARGV do\n"
    "  if i <= 2 + n then redis.call('ZADD', KEYS[1], exp, ARGV[i])\n"
    "  else redis.call('ZADD', KEYS[2], exp, ARGV[i]) end\n"
    "end\n"
    "return #ARGV - 2\n";

/* replay: applies usage admitted while Redis was unreachable (fail-open),
 * one call per tenant and day.
 *   KEYS[1] {tenant:ID}:config      hash (tokens_per_minute)
 *   KEYS[2] {tenant:ID}:tpm         tat, microseconds of Redis TIME
 *   KEYS[3] {tenant:ID}:daily:<d>   the day the usage happened in
 *   KEYS[4] {tenant:ID}:usage:total lifetime tokens
 *   KEYS[5] {tenant:ID}:replayed    zset journal entry id -> ms applied (kept 2 days)
 *   ARGV    triples: entry id, used tokens, ms of Redis TIME (estimated) it was used at
 * Reply: the number of entries applied (-1: the tenant was deleted meanwhile;
 * its usage is dropped rather than recreating its keys). An id already in KEYS[5] is skipped,
 * so a replay cut short and run again counts each entry once. Usage of the
 * last minute is also charged to the GCRA (tat at most a minute ahead:
 * what is past is past, and a long outage must not lock a tenant out). */
static const char REPLAY[] = PRELUDE
    "if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', fmt(now_ms - 172800000))\n"
    "local applied, total, recent = 0, 0, 0\n"
    "for i = 1, #ARGV - 2, 3 do\n"
    "  if redis.call('ZADD', KEYS[5], 'NX', fmt(now_ms), ARGV[i]) == 1 then\n"
    "    local u = tonumber(ARGV[i + 1])\n"
    "    applied = applied + 1\n"
    "    total = total + u\n"
    "    if now_ms - tonumber(ARGV[i + 2]) < 60000 then recent = recent + u end\n"
    "  end\n"
    "end\n"
    "if total > 0 then\n"
    "  redis.call('INCRBY', KEYS[3], fmt(total))\n"
    "  if redis.call('TTL', KEYS[3]) < 0 then redis.call('EXPIRE', KEYS[3], 172800) end\n"
    "  redis.call('INCRBY', KEYS[4], fmt(total))\n"
    "end\n"
    "local tpm = tonumber(redis.call('HGET', KEYS[1], 'tokens_per_minute')) or 0\n"
    "if recent > 0 and tpm > 0 then\n"
    "  local tat = tonumber(redis.call('GET', KEYS[2])) or now_us\n"
    "  if tat < now_us then tat = now_us end\n"
    "  tat = math.min(tat + recent * (60000000 / tpm), now_us + 60000000)\n"
    "  redis.call('SET', KEYS[2], fmt(tat), 'PX', fmt(math.ceil((tat - now_us) / 1000) + 1000))\n"
    "end\n"
    "return applied\n";

/* usage: a tenant's live usage, for the admin API (reads only).
 *   KEYS[1] {tenant:ID}:config, KEYS[2] :sessions, KEYS[3] :responses, KEYS[4] :tpm,
 *   KEYS[5..7] :daily:<d> for days ARGV[1]-1, ARGV[1], ARGV[1]+1
 *   ARGV[1] day guess, days since the epoch
 * Reply: {exists (0/1), live sessions, live responses, tokens that could be
 * reserved now (-1: no tokens_per_minute limit), tokens used today}. */
static const char USAGE[] = PRELUDE
    "if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0, 0, 0, 0} end\n"
    "local s = redis.call('ZCOUNT', KEYS[2], fmt(now_ms), '+inf')\n"
    "local r = redis.call('ZCOUNT', KEYS[3], fmt(now_ms), '+inf')\n"
    "local tpm = tonumber(redis.call('HGET', KEYS[1], 'tokens_per_minute')) or 0\n"
    "local left = -1\n"
    "if tpm > 0 then\n"
    "  local tat = tonumber(redis.call('GET', KEYS[4])) or now_us\n"
    "  if tat < now_us then tat = now_us end\n"
    "  left = math.max(0, math.floor((60000000 - (tat - now_us)) / (60000000 / tpm)))\n"
    "end\n"
    "local used = 0\n"
    "local idx = 6 + day - tonumber(ARGV[1])\n"
    "if idx >= 5 and idx <= 7 then used = tonumber(redis.call('GET', KEYS[idx])) or 0 end\n"
    "return {1, s, r, left, used}\n";

/* create: a tenant's record, only where there is none (POST /admin/tenants from
 * several clients or gateways at once: one of them creates it).
 *   KEYS[1] {tenant:ID}:config    hash
 *   ARGV    the record's field, value pairs (as HSET takes them)
 * Reply: 1 written, 0 the tenant exists (nothing written). */
static const char CREATE[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
    "redis.call('HSET', KEYS[1], unpack(ARGV))\n"
    "return 1\n";

/* The session directory (session_dir.h). A lease's value is
 * "<epoch> <instance> <url>"; instance ids and urls hold no spaces.
 *
 * dir_claim: look up a session's holder, or take the session.
 *   KEYS[1] {tenant:ID}:loc:<session id>  string lease, PX lease ttl
 *   KEYS[2] {tenant:ID}:loc_epochs        hash session id -> the last epoch handed out
 *   ARGV[1] session id, ARGV[2] instance, ARGV[3] url, ARGV[4] lease ttl, ms
 *   ARGV[5] mode: "new" (take it), "look" (say who holds it), "take" (take it
 *           if free and its epoch is still ARGV[6])
 * Reply {state, epoch, owner, url}, state as fg_dir_state: 0 free (epoch:
 * the last handed out), 1 held by this instance (renewed, or taken now with
 * a new epoch), 2 held by another instance, 3 take lost (another took it
 * since the look). One script, so of several takers exactly one wins. */
static const char DIR_CLAIM[] =
    "local cur = redis.call('GET', KEYS[1])\n"
    "local ep = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')\n"
    "if cur then\n"
    "  local e, inst, url = string.match(cur, '^(%d+) (%S+) (%S*)$')\n"
    "  if inst == ARGV[2] then\n"
    "    redis.call('PEXPIRE', KEYS[1], ARGV[4])\n"
    "    return {1, tonumber(e), inst, url}\n"
    "  end\n"
    "  if ARGV[5] == 'take' then return {3, tonumber(e) or 0, inst or '', url or ''} end\n"
    "  return {2, tonumber(e) or 0, inst or '', url or ''}\n"
    "end\n"
    "if ARGV[5] == 'look' then return {0, ep, '', ''} end\n"
    "if ARGV[5] == 'take' and ep ~= tonumber(ARGV[6]) then return {3, ep, '', ''} end\n"
    "ep = redis.call('HINCRBY', KEYS[2], ARGV[1], 1)\n"
    "redis.call('SET', KEYS[1], ep .. ' ' .. ARGV[2] .. ' ' .. ARGV[3], 'PX', ARGV[4])\n"
    "return {1, ep, ARGV[2], ARGV[3]}\n";

/* dir_renew: renew the leases one instance holds for one tenant.
 *   KEYS[1] {tenant:ID}:loc_epochs, KEYS[1 + i] the i-th lease
 *   ARGV[1] instance, ARGV[2] lease ttl, ms; then per lease: session id, epoch, url
 * Reply: per lease 1 (renewed; or it lapsed, during a Redis outage, and
 * nobody took it since: set again) or 0 (lost: another instance holds it or
 * took it since). */
static const char DIR_RENEW[] =
    "local out = {}\n"
    "for i = 2, #KEYS do\n"
    "  local a = 3 + (i - 2) * 3\n"
    "  local want = ARGV[a + 1] .. ' ' .. ARGV[1] .. ' ' .. ARGV[a + 2]\n"
    "  local cur = redis.call('GET', KEYS[i])\n"
    "  if cur == want then\n"
    "    redis.call('PEXPIRE', KEYS[i], ARGV[2])\n"
    "    out[#out + 1] = 1\n"
    "  elseif not cur and redis.call('HGET', KEYS[1], ARGV[a]) == ARGV[a + 1] then\n"
    "    redis.call('SET', KEYS[i], want, 'PX', ARGV[2])\n"
    "    out[#out + 1] = 1\n"
    "  else\n"
    "    out[#out + 1] = 0\n"
    "  end\n"
    "end\n"
    "return out\n";

/* dir_release: give a lease back.
 *   KEYS[1] the lease, KEYS[2] {tenant:ID}:loc_epochs
 *   ARGV[1] session id, ARGV[2] epoch, ARGV[3] instance, ARGV[4] 1: forget the epoch too
 * Reply 1 released, 0 not held by this instance with that epoch (nothing changed). */
static const char DIR_RELEASE[] =
    "local cur = redis.call('GET', KEYS[1])\n"
    "if not cur or string.sub(cur, 1, #ARGV[2] + #ARGV[3] + 2) ~= ARGV[2] .. ' ' .. ARGV[3] .. ' ' then return 0 end\n"
    "redis.call('DEL', KEYS[1])\n"
    "if ARGV[4] == '1' and redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then redis.call('HDEL', KEYS[2], ARGV[1]) end\n"
    "return 1\n";

/* dir_publish: publish one instance's record and read the live ones (session_dir.h).
 *   KEYS[1] {flashgate:instances}:live (zset: id -> expiry, ms), KEYS[2] {flashgate:instances}:load (hash)
 *   ARGV[1] instance id, ARGV[2] ttl, ms, ARGV[3] its record without the time, ARGV[4] most instances read
 * Expired records are dropped first; both keys expire when no instance publishes for a ttl.
 * Reply: {now ms, then per live instance (soonest to expire first, at most ARGV[4]): id, expiry ms,
 * record}. */
static const char DIR_PUBLISH[] =
    "local function fmt(x) return string.format('%.0f', x) end\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', fmt(now))\n"
    "for _, id in ipairs(dead) do redis.call('HDEL', KEYS[2], id) end\n"
    "if #dead > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', fmt(now)) end\n"
    "local ttl = tonumber(ARGV[2])\n"
    "redis.call('ZADD', KEYS[1], fmt(now + ttl), ARGV[1])\n"
    "redis.call('HSET', KEYS[2], ARGV[1], fmt(now) .. ' ' .. ARGV[3])\n"
    "for k = 1, 2 do\n"
    "  if redis.call('PTTL', KEYS[k]) < ttl then redis.call('PEXPIRE', KEYS[k], fmt(ttl)) end\n"
    "end\n"
    "local out = {now}\n"
    "local live = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[4]) - 1, 'WITHSCORES')\n"
    "for i = 1, #live, 2 do\n"
    "  out[#out + 1] = live[i]\n"
    "  out[#out + 1] = tonumber(live[i + 1])\n"
    "  out[#out + 1] = redis.call('HGET', KEYS[2], live[i]) or ''\n"
    "end\n"
    "return out\n";

static const struct {
    const char *name, *source;
} SCRIPTS[FG_QSCRIPT__COUNT] = {
    [FG_QSCRIPT_SESSION] = {"session", SESSION},
    [FG_QSCRIPT_RESERVE] = {"reserve", RESERVE},
    [FG_QSCRIPT_SETTLE] = {"settle", SETTLE},
    [FG_QSCRIPT_RENEW] = {"renew", RENEW},
    [FG_QSCRIPT_REPLAY] = {"replay", REPLAY},
    [FG_QSCRIPT_USAGE] = {"usage", USAGE},
    [FG_QSCRIPT_CREATE] = {"create", CREATE},
    [FG_QSCRIPT_DIR_CLAIM] = {"dir_claim", DIR_CLAIM},
    [FG_QSCRIPT_DIR_RENEW] = {"dir_renew", DIR_RENEW},
    [FG_QSCRIPT_DIR_RELEASE] = {"dir_release", DIR_RELEASE},
    [FG_QSCRIPT_DIR_PUBLISH] = {"dir_publish", DIR_PUBLISH},
};

const char *fg_qscript_source(fg_qscript_id id)
{
    return (unsigned)id < FG_QSCRIPT__COUNT ? SCRIPTS[id].source : "";
}

const char *fg_qscript_name(fg_qscript_id id)
{
    return (unsigned)id < FG_QSCRIPT__COUNT ? SCRIPTS[id].name : "?";
}

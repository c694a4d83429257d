/* client_secrets.h: short-lived credentials for browsers (client_secrets.c),
 * what POST /v1/realtime/client_secrets mints as OpenAI's does: a value
 * "ek_" + 32 hex digits (128 random bits) bound to the tenant whose API key
 * minted it, good for any number of realtime WebSocket handshakes until it
 * expires (the sessions it opened go on after that), with the session
 * settings it was minted with applied to the session created at connect. A
 * browser puts it in the subprotocol list as "openai-insecure-api-key.<value>"
 * (or a client sends it as a bearer token). Each use checks the minting key
 * again, so a revoked tenant's secrets stop working with its key. At most
 * GW_SECRETS_MAX live secrets, GW_SECRETS_PER_TENANT per tenant; expired ones
 * are dropped as new ones are minted and by the idle sweep. Service thread only.
 */
#ifndef FG_GATEWAY_CLIENT_SECRETS_H
#define FG_GATEWAY_CLIENT_SECRETS_H

#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"

#define GW_SECRET_PREFIX "ek_"
#define GW_SECRET_LEN (3 + 32)         /* bytes of a value */
#define GW_SECRETS_MAX 4096            /* live secrets on this gateway */
#define GW_SECRETS_PER_TENANT 256      /* live secrets of one tenant */

typedef struct gw_secrets gw_secrets;

/* An empty store; NULL on out of memory. */
gw_secrets *gw_secrets_new(void);
void gw_secrets_free(gw_secrets *st);

/* Mints a secret for tenant (minted with api_key, copied) that expires ttl_s
 * seconds after now_mono (monotonic seconds); session_event: the settings to
 * apply at connect as a session.update event's JSON (copied), or NULL.
 * Fills value[GW_SECRET_LEN + 1]. Errors: FG_ERR_BUSY (the tenant or the
 * gateway has its maximum of live secrets), FG_ERR_NOMEM, FG_ERR_IO (no random
 * bytes). */
fg_err gw_secrets_mint(gw_secrets *st, int tenant, const char *api_key, double now_mono, uint32_t ttl_s,
                       const char *session_event, char *value);

/* The live secret called value at now_mono: its minting key and (may be NULL)
 * session settings, valid until the next mint or sweep; NULL when unknown or
 * expired. */
typedef struct gw_secret_use {
    int tenant;
    const char *api_key;
    const char *session_event;
} gw_secret_use;
const gw_secret_use *gw_secrets_find(const gw_secrets *st, const char *value, double now_mono);

/* Drops the expired secrets. */
void gw_secrets_sweep(gw_secrets *st, double now_mono);
/* Live secrets (for tests and /healthz-style counts). */
size_t gw_secrets_count(const gw_secrets *st);

#endif

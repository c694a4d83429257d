/* gateway.h: flashgate's server: libwebsockets in front of the engine.
 *
 * One service thread (the caller of fg_gateway_run) owns every socket and all
 * session state. The engine's step thread only calls the wakeup hook, which
 * calls lws_cancel_service(); the service thread then drains the engine's
 * ready sessions on LWS_CALLBACK_EVENT_WAIT_CANCELLED and asks for writable
 * callbacks. No lws call is made from any other thread.
 *
 * Serves on one port: the WebSocket protocol (docs/protocol.md) on
 * /v1/realtime, and HTTP: GET /healthz, the admin API (docs/admin.md),
 * GET /metrics, GET /v1/status and the dashboard page (docs/metrics.md).
 */
#ifndef FG_GATEWAY_H
#define FG_GATEWAY_H

#include "config/fg_config.h"
#include "config/fg_error.h"
#include "engine/engine.h"
#include "gateway/redis_local.h"
#include "policies/quota.h"

typedef struct fg_gateway fg_gateway_t;

/* Creates the server and binds the listening socket. The engine must be in
 * serving mode and its wakeup hook set to fg_gateway_wakeup with the returned
 * gateway (use fg_gateway_engine_options to fill both). cfg must outlive it.
 * Errors: FG_ERR_IO (bind), FG_ERR_NOMEM, FG_ERR_INVALID_ARG. */
fg_err fg_gateway_create(const fg_config *cfg, fg_gateway_t **out, fg_diag *diag);
/* Hands the gateway its engine (opened after create, with the wakeup hook). */
void fg_gateway_set_engine(fg_gateway_t *gw, fg_engine_t *engine);
/* Enforces tenant quotas with this quota module (its notify hook must be
 * fg_gateway_wakeup with the gateway); without one, only the config's limits
 * apply and the config's tenants and keys are used. */
void fg_gateway_set_quota(fg_gateway_t *gw, fg_quota_t *quota);
/* Supervises the redis-server flashgate started for itself (redis_local.h)
 * from a timer on the service thread, and shows its state in /metrics. It
 * must outlive the gateway. */
void fg_gateway_set_redis_local(fg_gateway_t *gw, fg_redis_local_t *r);
/* The wakeup hook for fg_engine_options and fg_quota_options (thread-safe). */
void fg_gateway_wakeup(void *gateway);
/* Fills the engine options from the config, with the wakeup hook pointing at gw. */
void fg_gateway_engine_options(const fg_config *cfg, fg_gateway_t *gw, fg_engine_options *o);

/* The bound port (useful with server.port = 0 in tests). */
int fg_gateway_port(const fg_gateway_t *gw);

/* Runs the service loop until a stop was requested and the drain finished
 * (or drain_timeout_s passed). */
fg_err fg_gateway_run(fg_gateway_t *gw);
/* Asks the loop to drain and stop (thread-safe, e.g. from a signal thread):
 * no new connections, responses in progress are cancelled and end with
 * response.done, then every socket is closed with 1001. */
void fg_gateway_request_stop(fg_gateway_t *gw);

/* After fg_gateway_run returned (the drain is over): writes every session's
 * settings and KV to its file (fg_engine_save_all), blocking, so that each can
 * be resumed after a restart. Errors: FG_ERR_DISK_FULL, FG_ERR_IO (the first
 * failure; every session is tried). */
fg_err fg_gateway_save_sessions(fg_gateway_t *gw, fg_diag *diag);
/* Shutdown order: fg_gateway_save_sessions, fg_gateway_close_sessions (frees
 * every session, keeping their files, while the engine still runs), then
 * fg_engine_close (no more wakeups), then fg_gateway_destroy (closes the
 * sockets). */
void fg_gateway_close_sessions(fg_gateway_t *gw);
void fg_gateway_destroy(fg_gateway_t *gw);

#endif

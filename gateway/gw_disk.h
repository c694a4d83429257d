/* gw_disk.h: the engine's blocking disk calls off the service thread
 * (gw_disk.c). A session restore (fg_session_restore) or a save
 * (fg_session_save) reads or writes a whole session file, and a fork
 * (fg_session_fork) or a cut (fg_session_truncate) waits for the engine's
 * step thread to finish its step; on the service thread each would stall
 * every other session's deltas for as long. One worker thread runs them in
 * order and hands each result back on the service thread, as the quota
 * calls do (policies/quota.h): the worker only calls the engine (whose
 * fg_session_* calls are thread-safe in serving mode) and
 * lws_cancel_service(); the gateway drains the results with gw_disk_poll()
 * on its wakeup. Nothing of lws or the gateway's state is touched by the
 * worker.
 *
 * Threads: gw_disk_new, _restore, _fork, _save, _cut, _poll and _free on the
 * service thread only.
 */
#ifndef FG_GATEWAY_GW_DISK_H
#define FG_GATEWAY_GW_DISK_H

#include "config/fg_error.h"
#include "engine/engine.h"

struct lws_context;
typedef struct gw_disk gw_disk;

/* A job's result, on the service thread: es the restored or forked session
 * (restore, fork; FG_OK; the callee owns it), err and diag the engine's answer. */
typedef void (*gw_disk_done)(void *user, fg_session_t *es, fg_err err, const fg_diag *diag);

/* Starts the worker; ctx is woken (lws_cancel_service) when a job is done.
 * gate_file (tests only, debug.restore_gate_file; NULL or "": none): a
 * restore, a fork or a cut waits until that file exists, so a test can hold
 * one in progress.
 * NULL on out of memory or when no thread can be made. */
gw_disk *gw_disk_new(struct lws_context *ctx, const char *gate_file);
/* Stops the worker (after its job in hand) and calls each job's done on this
 * thread: the finished ones with their result, the others with FG_ERR_STATE. */
void gw_disk_free(gw_disk *d);

/* Queues fg_session_restore(e, p, ...) (p's strings copied). FG_ERR_NOMEM when
 * it cannot be queued (done is then not called). */
fg_err gw_disk_restore(gw_disk *d, fg_engine_t *e, const fg_session_params *p, gw_disk_done done, void *user);
/* Queues fg_session_fork(src, p, ...) (p's strings copied); src must stay
 * open, and start no response, until done. */
fg_err gw_disk_fork(gw_disk *d, fg_session_t *src, const fg_session_params *p, gw_disk_done done, void *user);
/* Queues fg_session_save(s); s must stay open until done. */
fg_err gw_disk_save(gw_disk *d, fg_session_t *s, gw_disk_done done, void *user);
/* A cut's result, on the service thread: cut FG_OK when the cache was cut
 * and holds expect tokens, with the tail queued and meta set (else why not:
 * FG_ERR_UNSUPPORTED for a deepseek4 cache, or when no cut was asked),
 * saved the save's answer (FG_ERR_STATE: nothing to save, an anonymous
 * session or no persistence). */
typedef void (*gw_disk_cut_done)(void *user, fg_err cut, fg_err saved, const fg_diag *diag);
/* Queues fg_session_truncate(s, keep) (keep < 0: none), then, when the
 * cache holds expect tokens after it, fg_session_append(s, tail) (the
 * conversation after the cut) and fg_session_set_meta(s, meta) (the record
 * that matches the cut), then fg_session_save(s) in any case, so that the
 * file on disk is the session as the answer describes it. tail and meta are
 * copied. s must stay open, and start no response, until done. */
fg_err gw_disk_cut(gw_disk *d, fg_session_t *s, int keep, int expect, const int32_t *tail, int n_tail,
                   const void *meta, size_t meta_len, gw_disk_cut_done done, void *user);
/* Calls done for every finished job, in order. */
void gw_disk_poll(gw_disk *d);

#endif

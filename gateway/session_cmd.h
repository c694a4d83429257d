/* session_cmd.h: the session commands (create, update, resume, items,
 * respond, cancel, close, the GA item commands) for every transport. A
 * transport hands a parsed client event and its event sink; the commands
 * answer through the session's event ring (gw_emit_*) or, before a session
 * exists, through the sink's own queue. Nothing here waits: quota calls and
 * restores answer later, found again by session id. Service thread only.
 */
#ifndef FG_GATEWAY_SESSION_CMD_H
#define FG_GATEWAY_SESSION_CMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/gateway.h"
#include "gateway/protocol.h"

typedef struct gw_session gw_session;
typedef struct gw_sink gw_sink;

/* What a transport does with a session's output. */
typedef struct gw_sink_ops {
    /* Queues an event outside the session's ring (an error before a session
     * exists, session.closed): json[len], seq its number (0: none). */
    void (*push)(gw_sink *k, uint64_t seq, const char *json, size_t len);
    /* The session's ring has events the sink has not taken: write when the transport can. */
    void (*request_write)(gw_sink *k);
    /* Unsent output changed: the transport applies its output limits. */
    void (*output_changed)(gw_sink *k);
    /* Whether to read the client changed (a quota answer awaited, output paused). */
    void (*rx_update)(gw_sink *k);
} gw_sink_ops;

/* A transport's end of a session: a WebSocket connection, an HTTP request.
 * Embedded in the transport's own struct. */
struct gw_sink {
    const gw_sink_ops *ops;
    fg_gateway_t *gw;
    int tenant;                     /* authenticated by the transport */
    bool ga;                        /* OpenAI GA flow: GA event sequence */
    bool beta;                      /* with ga: the Realtime beta's event names */
    char model[FG_PROTO_MAX_ID_BYTES + 1]; /* the model the client asked for ("" = the server's) */
    gw_session *session;            /* attached session, or NULL */
    struct gw_dir_wait *dir_wait;   /* a session.resume waiting on the session directory (gw_cluster.c), or NULL */
    struct gw_resume_wait *resume_wait; /* a session.resume whose file is being read, or NULL */
    struct gw_fork_wait *fork_wait; /* a session.create with fork_from being forked on gw_disk's worker, or NULL */
    uint64_t evt_counter;           /* event ids of the events outside a session */
};

/* Runs one client event on the sink's session (session.create/resume make one). */
void gw_cmd_dispatch(gw_sink *k, const fg_client_event *ev);
/* The transport's end goes away (a closed connection): what waits for it forgets it. */
void gw_cmd_sink_gone(gw_sink *k);
/* Sends an error: in the session's numbering when one is attached, else on the sink's own queue. */
void gw_sink_error(gw_sink *k, const fg_proto_error *err, uint32_t retry_after);
/* The restore half of a session.resume of a session this process does not
 * hold (its file read, the quota lease asked for, session.resumed): run at
 * once, or by gw_cluster.c once this instance holds the session's lease.
 * event_id: the client's, or NULL. */
void gw_resume_restore(gw_sink *k, const char *id, size_t id_len, uint64_t last_seq, const char *event_id);
/* Like gw_session_close, but the session's file stays: another instance holds it now. */
void gw_session_close_kept(gw_session *s, const char *reason);
/* Closes a session for good: an attached sink gets its unwritten events, a
 * cancelled response.done if it was responding, then session.closed with
 * reason ("client_requested", "evicted"); then the session is destroyed. */
void gw_session_close(gw_session *s, const char *reason);

#endif

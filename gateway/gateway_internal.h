/* gateway_internal.h: the gateway's private state, shared by server.c (lws
 * context, callbacks, HTTP), conn.c (WebSocket connections and client events)
 * and gw_session.c (the session table, resume buffers, engine events).
 * Everything here belongs to the service thread, except the fields marked
 * [any thread].
 */
#ifndef FG_GATEWAY_INTERNAL_H
#define FG_GATEWAY_INTERNAL_H

#include <libwebsockets.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config/base/clock.h"
#include "gateway/chat_template.h"
#include "gateway/gateway.h"
#include "gateway/metrics.h"
#include "gateway/protocol.h"
#include "gateway/session_cmd.h"
#include "gateway/tenants.h"
#include "policies/quota.h"
#include "policies/session_dir.h"

typedef struct gw_conn gw_conn;
typedef struct gw_session gw_session;

/* One serialized server event, kept for sending and for replay. The JSON text
 * sits after LWS_PRE bytes of headroom so lws_write can frame it in place. */
typedef struct gw_event {
    uint64_t seq;        /* 0: connection-level, not replayable */
    char *buf;           /* LWS_PRE + len + 1 bytes, inside the ring's data */
    size_t len;
    size_t off, slot;    /* buf = data + off; slot: its bytes there (rounded up) */
} gw_event;

/* A FIFO of events: the session's resume buffer, or a connection's own queue.
 * The events' bytes live in one circular buffer (gw_ring.c), so pushing an
 * event allocates only when the buffer must grow: nothing per token. */
typedef struct gw_ring {
    gw_event *ev;
    uint32_t cap, head, count;
    size_t bytes;                   /* sum of the events' len */
    char *data;                     /* data_cap bytes holding the events' slots in order, maybe wrapped */
    size_t data_cap;
    uint64_t grows;                 /* times data was reallocated (tests check the steady state) */
} gw_ring;

/* One conversation item as the client sees it (retrieve, delete, truncate),
 * and where its tokens are in the session's conv. */
#define GW_ITEM_DEFERRED SIZE_MAX   /* tok_start of an item queued behind the response in progress */
typedef struct gw_item {
    fg_proto_item it;               /* its strings point into blob; it.id into id */
    char id[FG_PROTO_MAX_ID_BYTES + 1];
    char *blob;
    size_t tok_start, tok_len;      /* tokens conv[tok_start .. +tok_len) */
    bool generated;                 /* a response's output (its message, its calls): it closed its own
                                       turn, so it leaves nothing open (chat_template.h) */
} gw_item;

typedef struct gw_items {
    gw_item *v;
    size_t n, cap;
} gw_items;

/* A stored Response object of an HTTP Responses conversation (store: true),
 * for GET /v1/responses/{id} (openai_responses.c). */
#define GW_SAVED_MAX 64             /* kept per session: the newest; older ones are not found */
typedef struct gw_saved {
    uint64_t n;                     /* the session's response number (resp_counter) */
    char *json;                     /* the Response object, as the call's reply showed it */
    size_t len;
} gw_saved;

/* A session's sampling settings: the one copy that session.create/update
 * change, a fork copies, the session file keeps and each response starts from. */
typedef struct gw_settings {
    double temperature, top_p, min_p; /* [0, 2], (0, 1], [0, 1) */
    uint32_t top_k;                   /* 0: off */
    bool has_seed;                    /* false: a random seed per response */
    uint64_t seed;
    uint32_t max_output_tokens;       /* tokens */
    uint32_t n_stop;
    char stop[FG_PROTO_MAX_STOP][FG_PROTO_MAX_STOP_BYTES + 1];
} gw_settings;

struct gw_session {
    fg_gateway_t *gw;
    char id[48];                    /* "sess_" + 32 hex digits: 128 random bits */
    int tenant;                     /* index into gw->tenants */
    fg_session_t *es;               /* the engine's session */
    gw_sink *sink;                  /* attached transport (session_cmd.h), or NULL (detached) */

    /* settings, as session.created shows them */
    char *instructions;
    size_t instructions_len;
    gw_settings set;

    /* the OpenAI GA flow (gw_realtime.c): created by a GA connection, shows GA events */
    bool ga;
    bool beta;                      /* the client sent OpenAI-Beta: realtime=v1: beta event names */
    char model[FG_PROTO_MAX_ID_BYTES + 1];
    char *tools;                    /* session.tools as compact JSON, or NULL; rendered in the head */
    fg_proto_tool_choice tool_choice;
    char tool_choice_name[FG_PROTO_MAX_ID_BYTES + 1];
    gw_items items;                 /* the conversation's items, in order (empty after a restore) */
    size_t resp_item;               /* index in items of the response's output item; SIZE_MAX - 1: an
                                       out-of-band response's item (shown, in no conversation); SIZE_MAX: none */
    bool resp_oob;                  /* the response is out of band: oob_es, the conversation untouched */
    fg_session_t *oob_es;           /* its engine session: a discarded fork or a fresh context */
    char *resp_metadata;            /* response.metadata (compact JSON) of the response, or NULL */
    uint32_t resp_max_output;

    /* the conversation after the head, as tokens (to rebuild on an instructions change) */
    fg_tokens conv;
    fg_tokens deferred;             /* items added during a response: they follow its output */
    fg_template_tail restored_tail; /* what conv[0, restored_n) leaves open, from a restored session's record
                                       (NONE otherwise); past it, the items say (gw_session_tail) */
    size_t restored_n;
    fg_template_tail oob_tail;      /* what an out-of-band response's context leaves open for its reply */
    bool rebuild;                   /* instructions changed: re-prefill at the next response */
    bool cache_built;               /* the engine session already holds head + conv (a fork, a restore) */
    bool conv_known;                /* conv is the whole conversation (false after some restores) */
    bool restoring;                 /* restored, its id reservation being written on gw_disk's worker
                                       (gw_persist.c): not resumable yet, and not freed meanwhile */
    uint32_t forks;                 /* session.creates forking it on gw_disk's worker (session_cmd.c):
                                       not freed, not read from its client and starting no response meanwhile */
    bool cutting;                   /* an item delete or truncation cutting its cache on gw_disk's worker
                                       (gw_realtime.c): the same holds as for forks */
    bool doomed, doomed_keep_file;  /* destroyed while restoring, forked or cut: done when the worker lets it go;
                                       no lookup by id finds it meanwhile */

    /* events */
    uint64_t next_seq;              /* the next sequence number (the first event is 1) */
    uint64_t evt_counter;           /* event ids "evt_<n>" */
    gw_ring ring;                   /* the newest events (resume buffer): the unsent ones, and up to
                                       sessions.resume_buffer_bytes of the others */
    uint64_t sent_seq;              /* newest seq written to the attached connection */
    size_t unsent_bytes;            /* bytes of ring events newer than sent_seq (attached) */
    uint32_t unsent_events;
    bool output_paused;             /* not draining the engine: the client is behind */

    /* the response in progress */
    bool responding;
    uint64_t engine_response;       /* the engine's response id */
    char resp_id[32];
    char item_id[32];
    uint64_t item_counter, resp_counter;
    uint64_t resp_floor;            /* restored: its file keeps only a reservation above the counter, so while
                                       resp_counter is still the restored one, any response number in
                                       [resp_floor, resp_counter] may be the newest (openai_responses.c) */
    uint64_t resp_restored;         /* resp_counter as restored (0: not restored) */
    struct gw_tools *tools_resp;    /* gw_tools.c: the response's tool calls (NULL until the first) */
    uint64_t resp_tokens;           /* tokens of the response in progress so far */
    uint64_t draft_tokens;          /* speculative drafts verified for its responses (engine usage) */
    uint64_t draft_accepted;        /* of which accepted */
    int64_t new_input;              /* tokens appended since the last response started (uncached work) */
    int64_t oob_input;              /* tokens appended to this response's out-of-band session (its work at most) */
    int64_t reserved;               /* tokens the quota reserved for the response in progress */
    bool quota_pending;             /* a quota answer is awaited: the client is not read meanwhile */
    char quota_key[96];             /* the response's lease in the quota module */
    bool leased;                    /* holds a session lease in the quota module */
    const char *cancel_reason;      /* set when the server cancels ("server_shutdown") */
    fg_proto_utf8_carry carry;
    char *pending;                  /* delta text not yet made an event (coalesced per write) */
    size_t pending_len, pending_cap;
    char *out_text;                 /* the whole reply, for response.done's output item */
    size_t out_len, out_cap;

    gw_saved *saved;                /* stored Response objects, oldest first, up to GW_SAVED_MAX */
    uint32_t n_saved;

    double last_activity;           /* seconds (monotonic) */
    /* latency marks of the response in progress, seconds (monotonic), for metrics.h */
    double resp_created_at;         /* response.create received */
    double resp_last_token_at;      /* the previous output token; 0 before the first */
    gw_session *hash_next;
    gw_session *all_next, *all_prev;
};

struct gw_conn {
    gw_sink sink;                   /* the gateway, tenant, flow (ga, beta: the OpenAI-Beta header), the
                                       handshake's ?model= and the attached session */
    struct lws *wsi;
    /* the message being received */
    char *rx;
    size_t rx_len, rx_cap;
    bool rx_too_big, rx_binary;
    /* message rate limit: token bucket */
    double bucket, bucket_time, last_rate_error;
    /* connection-level events (sequence number 0) */
    gw_ring own;
    bool rx_paused;                 /* reading stopped while the client is behind */
    bool closing;                   /* close with close_code once the queue is written */
    int close_code;
    /* output limits (sessions.output_buffer_*): the soft limit's timer, or the
     * hard limit's close deferred out of the pushing call */
    bool over_soft;                 /* unsent output above the soft limit (to half of it): not read,
                                       limit_timer runs */
    bool past_hard;                 /* past the hard limit: limit_timer closes it at once */
    lws_sorted_usec_list_t limit_timer;
    /* the Responses WebSocket mode (openai_ws.c): response.create events, no session of its own */
    bool rws;
    struct gw_oa_call *rws_call;    /* the response in progress, or NULL */
    char rws_unstored[48];          /* the session of its newest store: false response, kept while the
                                       connection lives (continued by previous_response_id on it), or "" */
    gw_conn *all_next, *all_prev;
};

struct fg_gateway {
    const fg_config *cfg;
    fg_engine_t *engine;
    const fg_tokenizer_t *tok;
    int n_ctx;                      /* the engine's context per session */
    struct lws_context *ctx;
    struct lws_vhost *vhost;
    int port;
    char model_id[128];             /* openai_http.h: the id GET /v1/models and session.model show */
    int64_t started_unix;           /* seconds since the epoch: the model's "created" */
    fg_proto_limits limits;
    fg_proto_buf scratch;           /* event serialization */

    gw_session **table;             /* hash table of sessions by id */
    size_t table_size;
    gw_session *sessions;           /* all sessions */
    size_t n_sessions;
    gw_tenant *tenants;             /* see tenants.h */
    int n_tenants, cap_tenants;
    fg_quota_t *quota;              /* NULL: no Redis, limits are the config's only */
    fg_redis_local_t *redis_local;  /* our own redis-server, supervised by redis_watch; or NULL */
    char persist_dir[4096];         /* the engine's session files: <persistence.dir>/tenants */
    uint8_t *meta_buf;              /* FG_SESSION_META_MAX_BYTES: a session record being written */
    size_t kv_bytes_per_token;
    fg_tokens *scripts;             /* debug.scripted_output tokenized (tests only), [n_scripts] */
    size_t n_scripts;
    uint64_t n_generated;           /* responses started that generate: the next script's index */
    gw_conn *conns;
    size_t n_conns;
    struct gw_secrets *secrets;     /* client_secrets.h: browser client secrets; NULL on out of memory */
    struct gw_disk *disk;           /* gw_disk.h: session restores and saves off this thread */
    size_t http_body_bytes;         /* http.c: buffers of the HTTP bodies being received */

    gw_metrics metrics;             /* metrics.h */
    struct gw_status *status;       /* status.h: the sampled history; NULL on out of memory */
    struct gw_dashboard *dashboard; /* dashboard.h: the page's files; NULL when not found */

    lws_sorted_usec_list_t sweep;   /* periodic idle-session sweep */
    lws_sorted_usec_list_t redis_watch; /* periodic check of redis_local */
    lws_sorted_usec_list_t admin_drain; /* POST /admin/drain: starts the drain once its reply is out */
    atomic_bool stop_requested;     /* [any thread] */
    bool draining;
    double drain_deadline;
    bool done;
};

/* The session's tenant id (for logs). */
static inline const char *gw_session_tenant(gw_session *s)
{
    const gw_tenant *t = gw_tenant_at(s->gw, s->tenant);
    return t ? t->rec.id : NULL;
}

/* gw_session.c */
/* A new session of tenant with a fresh id and an engine session that is a
 * fork of fork_src's (sharing its cached pages) when fork_src is given, else
 * empty. On failure NULL, *err the engine's error (FG_ERR_SESSION_*, ...) and
 * diag its message. */
gw_session *gw_session_new(fg_gateway_t *gw, int tenant, gw_session *fork_src, fg_err *err, fg_diag *diag);
/* Whether a fork of src shares its cache (else the new session is empty and
 * its conversation is prefilled again). */
bool gw_session_forkable(const gw_session *src);
/* The end of gw_session_new once the engine answered for s (prepared by
 * gw_session_prepare): es and e its fork's result (FG_ERR_UNSUPPORTED: no
 * fork, an empty engine session is made). Enters s in the table; or frees it
 * and returns NULL with *err and diag as gw_session_new has them. */
gw_session *gw_session_made(gw_session *s, fg_session_t *es, fg_err e, fg_err *err, fg_diag *diag);
/* The two halves of a session whose engine session is made elsewhere (a
 * restore on gw_disk's worker): prepare allocates it (id: kept, NULL: a
 * fresh one) and fills *sp for the engine (its user is the session); it is in
 * no table yet, and is freed with free() if the engine session never comes.
 * adopt gives it its engine session and enters it in the table. NULL on out
 * of memory. */
gw_session *gw_session_prepare(fg_gateway_t *gw, int tenant, const char *id, fg_session_params *sp);
void gw_session_adopt(gw_session *s, fg_session_t *es);
/* Frees a session; keep_file: its session file stays for a later restore
 * (shutdown, a refused resume), else it is deleted (close, expiry). */
void gw_session_destroy(gw_session *s, bool keep_file);
gw_session *gw_session_find(fg_gateway_t *gw, const char *id, size_t len);
/* Serializes the event in gw->scratch into the session's ring with sequence
 * number seq (already assigned) and asks for a write. */
void gw_session_push(gw_session *s, uint64_t seq);
uint64_t gw_session_take_seq(gw_session *s);
void gw_session_info(const gw_session *s, fg_proto_session_info *info);
/* Appends the session's prompt head: BOS, the instructions and, when tools are
 * declared and tool_choice is not "none", the tool declarations after them
 * (docs/protocol.md "Tool declarations"; one function so the live session, the
 * rebuild and the restore check agree on it). Errors: those of the template,
 * FG_ERR_UNSUPPORTED when tools are declared and the vocabulary has no DeepSeek
 * chat markers. */
fg_err gw_session_head(const gw_session *s, fg_tokens *out, fg_diag *diag);
/* Whether tools and tool_choice can stand together on this model: parses
 * tools (compact JSON, NULL: none) and checks the choice; diag says what is
 * wrong and *field the protocol field ("session.tools", "session.tool_choice"). */
fg_err gw_tools_check(const fg_gateway_t *gw, const char *tools, size_t len, fg_proto_tool_choice choice,
                      const char *choice_name, const char **field, fg_diag *diag);
/* Drains the engine's events of a session into protocol events. */
void gw_session_drain_engine(gw_session *s);
/* Turns coalesced delta text into one event (before a write or a done). */
void gw_session_flush_delta(gw_session *s);
void gw_session_attach(gw_session *s, gw_sink *k, uint64_t last_seq);
void gw_session_detach(gw_session *s);
void gw_sessions_sweep(fg_gateway_t *gw);

/* The one output path of session events: take the numbers, write the event
 * into gw->scratch with them, hand the writer's result to gw_emit_push. */
typedef struct gw_emit {
    uint64_t seq, evt;
} gw_emit;
static inline gw_emit gw_emit_next(gw_session *s)
{
    gw_emit e = {s->next_seq++, ++s->evt_counter};
    return e;
}
/* Queues the event in gw->scratch when written is FG_OK (else it is dropped, logged). */
void gw_emit_push(gw_session *s, gw_emit em, fg_err written);
/* Cancels the response in progress, in whichever engine session runs it. */
void gw_session_cancel(gw_session *s);

/* gw_realtime.c: the OpenAI GA flow's items and events */
/* Registers an item (copied) with its token range; generated: a response's
 * output (gw_item.generated). False on out of memory. */
bool gw_items_push(gw_items *l, const fg_proto_item *it, const char *id, size_t tok_start, size_t tok_len,
                   bool generated);
void gw_items_free(gw_items *l);
bool gw_items_copy(gw_items *dst, const gw_items *src);
/* The id of the last item, or NULL. */
const char *gw_items_last_id(const gw_items *l);
/* After a response: deferred items get their place after its output. */
void gw_items_place_deferred(gw_session *s, size_t at);
/* What conv[0, pos) leaves open for what follows (chat_template.h), from the
 * items (the last one in conv ending at pos) and, before them, the restored
 * record's tail; pos within an item, or after tokens no item holds (a v1
 * reply), leaves nothing open. */
fg_template_tail gw_items_tail_at(const gw_session *s, size_t pos);
/* What the next item or reply follows: the items queued behind the response
 * in progress (or, with none, the reply: nothing open), else conv's end. */
fg_template_tail gw_session_tail(const gw_session *s);
/* The beta name of the GA event in json (response.text.delta for
 * response.output_text.delta, ...), or NULL when it kept its name. */
const char *gw_ga_beta_name(const char *json);
/* GA events of an added item (conversation.item.added, .done). */
void gw_ga_item_added(gw_session *s, const gw_item *item, const char *previous_id);
/* GA events at a response's start (output_item.added, conversation.item.added,
 * content_part.added) and end (output_text.done ... conversation.item.done). */
void gw_ga_response_begin(gw_session *s, size_t tok_start);
void gw_ga_response_end(gw_session *s, const char *status);
/* conversation.item.retrieve / delete / truncate. */
void gw_ga_item_command(gw_sink *k, const fg_client_event *ev);

/* gw_tools.c: tool calls in a GA response (docs/protocol.md "Tool calls in the reply") */
typedef struct gw_tools gw_tools;
/* Before a response: whether it parses tool calls (tools rendered, GA); sets
 * rp->keep_control then. False: out of memory. */
bool gw_tools_begin(gw_session *s, fg_response_params *rp);
bool gw_tools_on(const gw_session *s);
/* The tokens that open the call tool_choice forces ("required", a named
 * function), appended after the reply marker as the start of the assistant's
 * turn; NULL: none. Valid until the next gw_tools_begin. */
const fg_tokens *gw_tools_prefix(const gw_session *s);
/* Feeds those bytes to the parser, as if the model wrote them: once the
 * response has started (its events may open the call's item). */
void gw_tools_prefill(gw_session *s);
/* The response's released text (gw_tools_on). */
void gw_tools_text(gw_session *s, const char *text, size_t n);
/* The response ended (completed: not cut by a limit or a cancel): the parse's end, the reply's check. */
void gw_tools_end(gw_session *s, bool completed);
/* The response's calls as response.done shows them, up to max. */
uint32_t gw_tools_output(const gw_session *s, fg_proto_item *out, uint32_t max);
uint32_t gw_tools_accepted(const gw_session *s);
void gw_tools_free(gw_session *s);
/* gw_session.c: appends released reply text (a delta and the whole reply). */
void gw_session_add_text(gw_session *s, const char *bytes, size_t n);

/* gw_persist.c */
/* Writes the session's record (settings, counters, conversation) into its
 * engine session, to be saved with the KV. Failures are logged, not fatal. */
void gw_session_store_meta(gw_session *s);
/* The record s will have once its cache is cut to cached tokens, the head
 * and conv's first conv_n (no rebuild pending), in gw->meta_buf (*len
 * bytes, valid until the next record is made); NULL when it cannot be made. */
const uint8_t *gw_session_meta_cut(gw_session *s, int cached, size_t conv_n, size_t *len);
/* The one map from an engine error (append, respond, restore, fork, a failed
 * response) to its protocol code; FG_ERR_SESSION_* and FG_ERR_DISK_FULL get
 * their own codes, what has none is internal_error. */
fg_proto_code gw_engine_code(fg_err e);
/* Opens the session saved under id for tenant off the service thread
 * (gw_disk.h: the file is read, then rewritten with the new id reservation,
 * on the worker) and hands it to done on the service thread, attached to
 * nothing; or NULL with code (session_not_found, session_lost,
 * internal_error) and msg (what the client is told). Returns false when it
 * cannot start (an invalid id, no engine, out of memory): *code and msg say
 * why, and done is not called. */
typedef void (*gw_restore_done)(void *user, gw_session *s, fg_proto_code code, const char *msg);
bool gw_session_restore(fg_gateway_t *gw, int tenant, const char *id, size_t id_len, gw_restore_done done,
                        void *user, fg_proto_code *code, char *msg, size_t msg_cap);
/* Whether the head with the session's instructions, its conversation and
 * (generate) the reply marker and one token fit the context: a rebuild for
 * new instructions is refused before anything is replaced when not. */
bool gw_session_rebuild_fits(gw_session *s, bool generate);
/* Resident KV bytes of a tenant (the engine's count; a walk of the sessions
 * when the engine cannot say). */
int64_t gw_tenant_kv_bytes(fg_gateway_t *gw, int tenant);

/* gw_cluster.c: the session directory's side of the gateway (policies/session_dir.h) */
/* Whether the directory is on (cluster.advertise_url set and Redis up as a module). */
bool gw_cluster_on(const fg_gateway_t *gw);
/* A transport's request for a session not held here, waiting on the directory
 * (its sink's dir_wait; the sink is not read meanwhile). */
typedef struct gw_dir_wait gw_dir_wait;
typedef struct gw_cluster_ops {
    /* This instance holds the session's lease now: restore it (a failed restore
     * calls gw_cluster_restore_failed) and go on. */
    void (*adopt)(gw_sink *k, gw_dir_wait *w);
    /* Not to be had here: code session_elsewhere or session_taken (r names the
     * holder), quota_unavailable (retry seconds), session_not_found, internal_error. */
    void (*refuse)(gw_sink *k, gw_dir_wait *w, fg_proto_code code, const fg_dir_result *r, uint32_t retry,
                   const char *msg);
} gw_cluster_ops;
struct gw_dir_wait {
    const gw_cluster_ops *ops;
    fg_gateway_t *gw;
    gw_sink *sink;                  /* NULL once the transport left */
    int tenant;
    char tenant_id[FG_NAME_MAX + 1];
    char session_id[FG_NAME_MAX + 1];
    uint64_t arg;                   /* the caller's: session.resume's last_sequence_number, a response number */
    bool has_event_id;
    char event_id[FG_PROTO_MAX_ID_BYTES + 1];
    double started;                 /* seconds (monotonic), for the log */
};
/* Asks the directory for session id of k's tenant; ops answer (at once for a malformed id). */
void gw_cluster_claim(gw_sink *k, const char *id, size_t id_len, const gw_cluster_ops *ops, uint64_t arg,
                      const char *event_id);
/* session.resume of a session not held here: the directory is asked, then
 * the session is restored here (gw_resume_restore), or the client is told
 * where it is (session_elsewhere), or that another instance won the adoption
 * (session_taken). The sink is not read meanwhile. */
void gw_cluster_resume(gw_sink *k, const char *id, size_t id_len, uint64_t last_seq, const char *event_id);
/* The restore after a claim failed: the lease goes back (gone: the session does not exist, its epoch too). */
void gw_cluster_restore_failed(fg_gateway_t *gw, int tenant, const char *id, size_t id_len, bool gone);
/* A session made here (not restored): registered as held. */
void gw_cluster_session_new(gw_session *s);
/* A session leaves this instance; keep_file: its file stays (its epoch too). */
void gw_cluster_session_gone(gw_session *s, bool keep_file);
/* The transport of k leaves: a resume waiting on the directory is dropped. */
void gw_cluster_sink_gone(gw_sink *k);
/* Whether this instance may serve the session now: its lease is held and recent (the same
 * test as the file writes' fence). A response.create is refused otherwise. */
bool gw_cluster_holds(gw_session *s);
/* The session is no longer this instance's: the client gets session_moved (event_id: the
 * refused event's, or NULL), the session is closed here and its file left to its holder. */
void gw_cluster_moved(gw_session *s, const char *event_id);
/* Every sweep: sessions whose lease another instance took are closed here, their files left alone. */
void gw_cluster_sweep(fg_gateway_t *gw);
/* The engine's persist_fence (fg_engine_options): may this instance write the session's file? */
bool gw_cluster_fence(void *user, const char *tenant_name, const char *name);

/* conn.c */
/* session_event: a client secret's session settings (a session.update's
 * JSON) for the GA session created at connect, or NULL. */
void gw_conn_on_open(gw_conn *c, const char *session_event);
void gw_conn_on_receive(gw_conn *c, const void *in, size_t len);
int gw_conn_on_writable(gw_conn *c);
void gw_conn_on_close(gw_conn *c);
/* Queues an event (gw->scratch) on the connection itself (sequence number 0). */
void gw_conn_push_own(gw_conn *c);
/* Stops reading a client while its session's output is paused, a quota
 * answer, a restore or a fork is awaited (its own, or another client's of
 * its session) or its unsent output is above the soft
 * limit (reading starts again at half of it), and reads again when none holds. */
void gw_conn_rx_update(gw_conn *c);
/* After the connection's unsent output changed (a push, a write): applies the
 * output limits (reading, the soft limit's timer, the close 1008 past the
 * hard one, deferred to a timer so the caller's state stays valid). */
void gw_conn_output_changed(gw_conn *c);
void gw_conn_request_write(gw_conn *c);
/* Queues text[len] as one message on the connection's own queue and asks for a write. */
void gw_conn_push_text(gw_conn *c, const char *text, size_t len);
/* openai_ws.c: the Responses WebSocket mode on a connection (c->rws) */
#define GW_RESPONSES_WS_PATH "/v1/responses"
/* One whole text message from the client. */
void gw_rws_on_message(gw_conn *c, const char *text, size_t len);
/* The mode's error event {"type":"error","status","error":{type, code, message, param}} (param NULL: null). */
void gw_rws_error(gw_conn *c, unsigned status, const char *type, const char *code, const char *param,
                  const char *msg);
/* A call on c ended with session s kept: conn_local (store: false) keeps it
 * for this connection only, replacing the one kept before (which ends). */
void gw_conn_keep_unstored(gw_conn *c, gw_session *s, bool conn_local);
/* The connection closed: its call in progress and its kept session end. */
void gw_rws_on_close(gw_conn *c);
/* The WebSocket connection's sink operations. */
extern const gw_sink_ops gw_conn_sink_ops;

/* The sink's operations, for the session layer. */
static inline void gw_sink_request_write(gw_sink *k)
{
    k->ops->request_write(k);
}
static inline void gw_sink_output_changed(gw_sink *k)
{
    k->ops->output_changed(k);
}
static inline void gw_sink_rx_update(gw_sink *k)
{
    k->ops->rx_update(k);
}

/* rings (gw_ring.c) */
/* Appends a copy of an event; the ring grows as needed (its owner bounds it),
 * else the copy goes into free space of its buffer without an allocation.
 * False on out of memory (nothing appended). */
bool gw_ring_push(gw_ring *r, uint64_t seq, const char *json, size_t len);
/* The i-th oldest event (i < count). */
static inline gw_event *gw_ring_at(const gw_ring *r, uint32_t i)
{
    return &r->ev[(r->head + i) % r->cap];
}
/* Frees the oldest event (count > 0). */
void gw_ring_drop_oldest(gw_ring *r);
void gw_ring_free(gw_ring *r);
/* The session's write path: the event e of its ring was written to the
 * attached connection; what was sent beyond the resume buffer's limits leaves. */
void gw_session_sent(gw_session *s, const gw_event *e);

#endif

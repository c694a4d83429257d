/* openai_sink.h: one OpenAI HTTP call (chat completion, response) on the
 * session layer (openai_sink.c). The call is the session's sink: it makes a
 * session (or attaches to a kept one), adds the request's items, runs one
 * response with the request's sampling, and hands the reply to its surface
 * (openai_chat.c, openai_responses.c), which writes OpenAI's shapes. Service
 * thread only.
 */
#ifndef FG_GATEWAY_OPENAI_SINK_H
#define FG_GATEWAY_OPENAI_SINK_H

#include <stdbool.h>
#include <stdint.h>

#include "gateway/gateway_internal.h"
#include "gateway/http.h"

typedef struct gw_oa_call gw_oa_call;

/* The reply's figures, from the session layer's response.done. */
typedef struct gw_oa_result {
    int64_t input_tokens, cached_tokens, output_tokens;
    bool incomplete;               /* stopped by max_output_tokens or the context */
    const char *reason;            /* incomplete: "max_output_tokens" | "context_length" */
    struct json_t *calls;          /* response.done's function_call items (completed), an array; NULL: none */
} gw_oa_result;

/* A tool call of the reply as it streams (the session's function_call
 * events): its start, a piece of its arguments, its end. */
typedef enum { GW_OA_CALL_BEGIN, GW_OA_CALL_DELTA, GW_OA_CALL_DONE } gw_oa_call_step;
typedef struct gw_oa_call_ev {
    gw_oa_call_step step;
    uint32_t index;                /* the call's number in the reply, from 0 */
    const char *item_id, *call_id, *name; /* BEGIN: the function_call item's (NUL-terminated) */
    const char *json;              /* DELTA: the new arguments text as a JSON string, quotes included
                                      (as the session wrote it: copied out as it is, no allocation);
                                      DONE: the whole arguments, plain text */
    size_t len;
} gw_oa_call_ev;

/* What a surface writes. Each is called at most once, except text and call. */
typedef struct gw_oa_surface {
    void (*started)(gw_oa_call *c);                          /* the response runs */
    void (*text)(gw_oa_call *c, const char *t, size_t n);    /* new reply text (streaming only) */
    void (*done)(gw_oa_call *c, const gw_oa_result *r);      /* the reply is whole (c->text) */
    /* refused or failed; status is the HTTP status (or the stream's error event) */
    void (*failed)(gw_oa_call *c, unsigned status, const char *type, const char *code, const char *param,
                   const char *msg);
    void (*free)(gw_oa_call *c);                             /* the surface's own state (c->user) */
    /* a tool call's progress (streaming only, in order); NULL: calls come whole, with done */
    void (*call)(gw_oa_call *c, const gw_oa_call_ev *ev);
} gw_oa_surface;

struct gw_oa_call {
    gw_sink sink;                  /* the session layer's view of this call */
    gw_http_req *req;              /* NULL once the client left, or on a WebSocket */
    gw_conn *ws;                   /* the Responses WebSocket connection it answers on (openai_ws.c), or NULL */
    bool conn_local;               /* ws, store: false: the session is kept for this connection only */
    const gw_oa_surface *surface;
    void *user;                    /* the surface's state */
    bool stream;                   /* the client asked for SSE */
    bool streaming;                /* the SSE headers are out */
    bool keep;                     /* the session stays (detached) after the reply: a stored response */
    const fg_proto_item *items;    /* added once the session is there (the surface owns them) */
    size_t n_items;
    fg_proto_sampling sampling;    /* this response's */
    const struct gw_oa_tools *tools; /* the request's tools and tool_choice (the surface owns them), or NULL */
    uint32_t calls_streamed;       /* tool calls whose start went to surface->call */
    int64_t created;               /* seconds since the epoch */
    char *text;                    /* the reply so far */
    size_t text_len;
    fg_proto_buf esc;              /* scratch for JSON strings (reused: no allocation per chunk once grown) */
    /* private (openai_sink.c) */
    int state_;
    lws_sorted_usec_list_t step_;
    gw_ring own_;
    size_t text_cap_, taken_, streamed_;
    char *body_;                   /* a whole reply being built (not streaming) */
    size_t body_len_, body_cap_;
    bool body_failed_;
    char *cap_;                    /* gw_oa_capture_begin's copy */
    size_t cap_len_, cap_cap_;
    bool capturing_, cap_failed_;
};

/* A call for req of tenant; NULL on out of memory. The surface answers it. */
gw_oa_call *gw_oa_call_new(fg_gateway_t *gw, gw_http_req *req, int tenant, const gw_oa_surface *surface,
                           void *user);
/* Starts it on a new session with these instructions (NULL: none). */
void gw_oa_call_start(gw_oa_call *c, const char *instructions, size_t len);
/* Starts it on a kept session of the same tenant (idle: not responding, no sink). */
void gw_oa_call_continue(gw_oa_call *c, gw_session *s);
/* The call waits before it starts (the session directory): the client leaving frees it. */
void gw_oa_call_hold(gw_oa_call *c);
/* Frees a call that was never started (a refusal already answered by the surface). */
void gw_oa_call_free(gw_oa_call *c);
/* A call answering on a Responses WebSocket connection (conn->rws_call is it until it ends). */
gw_oa_call *gw_oa_call_new_ws(fg_gateway_t *gw, gw_conn *ws, int tenant, const gw_oa_surface *surface, void *user);
/* Its connection wrote some of its events (the call goes on if it waited), or closed (the call ends). */
void gw_oa_call_wake(gw_oa_call *c);
void gw_oa_call_gone(gw_oa_call *c);

/* For surfaces: bytes of the reply (streamed once gw_oa_stream_begin ran,
 * else gathered for gw_oa_reply, which sends them as one 200 JSON body); the escaped JSON string of text[n] (in c->esc, valid
 * until the next call), bytes that are not UTF-8 written as U+FFFD. */
void gw_oa_write(gw_oa_call *c, const char *bytes, size_t n);
void gw_oa_reply(gw_oa_call *c);
#define gw_oa_lit(c, s) gw_oa_write((c), "" s, sizeof(s) - 1) /* a string literal */
void gw_oa_writef(gw_oa_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *gw_oa_json_text(gw_oa_call *c, const char *text, size_t n, size_t *len);
/* Copies what the surface writes from begin to end (written as well, to the
 * client, if it is still there): a stored Response object, built once. end
 * returns the bytes (malloc'd, NUL-terminated; the caller frees them), or
 * NULL on out of memory. */
void gw_oa_capture_begin(gw_oa_call *c);
char *gw_oa_capture_end(gw_oa_call *c, size_t *len);
/* Begins the SSE reply (200, text/event-stream; on a WebSocket: nothing to send). */
void gw_oa_stream_begin(gw_oa_call *c);
/* Ends one streamed event: on a WebSocket, what was written since the last end goes as one message. */
void gw_oa_event_end(gw_oa_call *c);
/* Ends the streamed reply (HTTP: the connection closes; a WebSocket stays). */
void gw_oa_stream_end(gw_oa_call *c);
/* A refusal: HTTP, the status and OpenAI's error body; a WebSocket, the
 * Responses WebSocket mode's error event {"type":"error","status",...,"error":{...}}. */
void gw_oa_fail(gw_oa_call *c, unsigned status, const char *type, const char *code, const char *param, const char *msg);

#endif

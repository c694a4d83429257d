/* protocol.h: flashgate's WebSocket wire protocol, version 1 ("flashgate.v1").
 *
 * Owns the meaning of the bytes on the wire and nothing else: it parses one
 * client text message into a typed, validated fg_client_event, and writes
 * server events as JSON text into a caller-owned growable buffer. It knows no
 * sockets, sessions, tenants or engine: the server decides what an event does,
 * which session it belongs to and which sequence number it gets.
 *
 * docs/protocol.md is the normative spec (events, fields, limits, error codes,
 * resume rules). tests/unit/test_protocol.c checks this code against it: every
 * client example in the docs parses, every server example has the keys the
 * writers produce, every error code below is documented.
 *
 * Threads: no global state. Every function is reentrant; the caller's structs
 * (fg_client_event, fg_proto_buf, fg_proto_utf8_carry) are touched by one
 * thread at a time (the gateway service thread).
 *
 * Memory: fg_proto_parse allocates (jansson) and fg_client_event_free releases;
 * the writers grow an fg_proto_buf only when an event is bigger than any before
 * it, so a reused buffer makes the per-token path allocation-free.
 */
#ifndef FG_GATEWAY_PROTOCOL_H
#define FG_GATEWAY_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"

/* ---- versioning and fixed limits (docs/protocol.md "Limits") ---- */

#define FG_PROTO_SUBPROTOCOL "flashgate.v1" /* Sec-WebSocket-Protocol value */
#define FG_PROTO_GA_SUBPROTOCOL "realtime"   /* OpenAI's browser clients offer it: the GA flow */
#define FG_PROTO_PATH "/v1/realtime"        /* the WebSocket endpoint */

#define FG_PROTO_MAX_ID_BYTES 64       /* event_id, session_id, response_id, call_id, name */
#define FG_PROTO_MAX_STOP 4            /* stop strings per session or response */
#define FG_PROTO_MAX_STOP_BYTES 64     /* each stop string: 1..64 bytes */
#define FG_PROTO_MAX_PARTS 16          /* content parts per message item */
#define FG_PROTO_MAX_TOP_K 1000000
#define FG_PROTO_MAX_SEED (UINT64_C(1) << 53) /* the largest integer every JSON parser keeps exactly */
#define FG_PROTO_MAX_SEQUENCE (UINT64_C(1) << 53)
#define FG_PROTO_MAX_ITEM_ID_BYTES 32  /* a client's item id: [A-Za-z0-9_-] */
#define FG_PROTO_MAX_TOOLS 128         /* session.tools entries */
#define FG_PROTO_MAX_INPUT 16          /* response.input items (out-of-band responses) */
#define FG_PROTO_MAX_METADATA 16       /* response.metadata keys */

/* WebSocket close codes the server uses (docs/protocol.md "Closing"). */
enum {
    FG_PROTO_CLOSE_NORMAL = 1000,     /* the client closed; echoed */
    FG_PROTO_CLOSE_GOING_AWAY = 1001, /* server shutdown or drain, after an error event shutting_down */
    FG_PROTO_CLOSE_PROTOCOL = 1002,   /* a WebSocket framing violation */
    FG_PROTO_CLOSE_POLICY = 1008,     /* slow reader: the output buffer passed its hard limit */
    FG_PROTO_CLOSE_INTERNAL = 1011,   /* the server failed; the session may still be resumable */
};

/* Configurable parse limits; the gateway fills them from its config. */
typedef struct fg_proto_limits {
    size_t max_message_bytes;      /* one client message (all its frames); default 1 MiB */
    size_t max_instructions_bytes; /* session.instructions; default FG_CONFIG_MAX_INSTRUCTIONS_BYTES */
    size_t max_text_bytes;         /* one content part's text, arguments, output; default 256 KiB */
    uint32_t max_output_tokens;    /* upper bound of every max_output_tokens; default 32768 */
    uint32_t max_depth;            /* JSON nesting of the message; default 32 */
} fg_proto_limits;

/* Fills lim with the defaults above. */
void fg_proto_limits_default(fg_proto_limits *lim);

/* ---- error codes ---- */

/* Wire error codes. Names and meanings in fg_proto_code_info() and docs/protocol.md. */
typedef enum fg_proto_code {
    FG_PROTO_OK = 0,
    /* the message itself */
    FG_PROTO_INVALID_JSON,
    FG_PROTO_INVALID_UTF8,
    FG_PROTO_BINARY_NOT_SUPPORTED,
    FG_PROTO_FRAME_TOO_LARGE,
    FG_PROTO_INVALID_EVENT,
    FG_PROTO_UNKNOWN_EVENT_TYPE,
    FG_PROTO_MISSING_FIELD,
    FG_PROTO_INVALID_TYPE,
    FG_PROTO_INVALID_VALUE,
    /* the event against the connection's state */
    FG_PROTO_NO_SESSION,
    FG_PROTO_SESSION_EXISTS,
    FG_PROTO_SESSION_NOT_FOUND,
    FG_PROTO_SEQUENCE_EXPIRED,
    FG_PROTO_RESPONSE_IN_PROGRESS,
    FG_PROTO_NO_RESPONSE_IN_PROGRESS,
    FG_PROTO_CONTEXT_LENGTH_EXCEEDED,
    /* limits and capacity */
    FG_PROTO_TOO_MANY_SESSIONS,
    FG_PROTO_RATE_LIMITED,
    FG_PROTO_KV_UNAVAILABLE,
    FG_PROTO_RATE_LIMIT_EXCEEDED, /* reserved for tenant quotas */
    FG_PROTO_INSUFFICIENT_QUOTA,  /* reserved for tenant quotas */
    FG_PROTO_QUOTA_UNAVAILABLE,   /* reserved for tenant quotas */
    /* the server */
    FG_PROTO_SHUTTING_DOWN,
    FG_PROTO_SESSION_LOST,
    FG_PROTO_PERSIST_FAILED,
    FG_PROTO_INTERNAL_ERROR,
    FG_PROTO_TOOL_CALL_INVALID, /* the model's tool call cannot be used (malformed, or refused by tool_choice) */
    FG_PROTO_SESSION_ELSEWHERE, /* another live instance holds the session: error.location names it */
    FG_PROTO_SESSION_TAKEN,     /* another instance adopted the session first (a migration race) */
    FG_PROTO_SESSION_MOVED,     /* this instance lost the session to another (its lease expired) */
    FG_PROTO_CODE__COUNT
} fg_proto_code;

/* The error.type of a code: how a client should react. */
typedef enum fg_proto_error_type {
    FG_PROTO_INVALID_REQUEST_ERROR, /* fix the request; retrying as-is fails again */
    FG_PROTO_RATE_LIMIT_ERROR,      /* retry later (after retry_after when present) */
    FG_PROTO_SERVER_ERROR,          /* the server's fault or state; retry later */
} fg_proto_error_type;

typedef struct fg_proto_code_info {
    const char *name;        /* the wire code, e.g. "missing_field" */
    fg_proto_error_type type;
    bool retry_after;        /* errors with this code carry retry_after */
    bool reserved;           /* defined for v1, not sent yet (the quota layer will) */
    const char *meaning;     /* one line, as in docs/protocol.md */
} fg_proto_code_info;

/* The table row of a code; NULL for FG_PROTO_OK and out-of-range values. */
const fg_proto_code_info *fg_proto_code_info_get(fg_proto_code c);
/* Wire name of a code ("invalid_value"); "internal_error" for out-of-range values. */
const char *fg_proto_error_code_name(fg_proto_code c);
/* Wire name of an error type ("invalid_request_error"). */
const char *fg_proto_error_type_name(fg_proto_error_type t);
/* The code with this wire name, or FG_PROTO_OK when there is none. */
fg_proto_code fg_proto_error_code_from_name(const char *name);

/* One error, as the error event carries it. Fixed-size so that it needs no
 * allocation and outlives the event that caused it. Strings are NUL-terminated;
 * an empty param or !has_event_id is written as JSON null. */
typedef struct fg_proto_error {
    fg_proto_code code;
    char message[256];
    char param[96];                            /* JSON path of the bad field, e.g. "item.content[2].text" */
    bool has_event_id;
    char event_id[FG_PROTO_MAX_ID_BYTES + 1];  /* the client's event_id, echoed */
    /* session_elsewhere, session_taken, session_moved: the holder ("" unknown), as
     * error.location {instance_id, url} (docs/protocol.md "Sessions across instances") */
    char location_instance[65];
    char location_url[256];
} fg_proto_error;

/* Fills err (code, param or NULL, printf message) and returns FG_ERR_INVALID_ARG,
 * so the server builds state errors the same way the parser does. event_id:
 * the client's event_id to echo, or NULL (copied, cut to 64 bytes). */
fg_err fg_proto_error_set(fg_proto_error *err, fg_proto_code code, const char *param, const char *event_id,
                          const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* ---- client events ---- */

/* A string inside a parsed event: valid UTF-8, no U+0000, NUL-terminated at
 * ptr[len]; points into the event's JSON tree and lives until
 * fg_client_event_free. */
typedef struct fg_proto_str {
    const char *ptr;
    size_t len;
} fg_proto_str;

typedef enum fg_client_event_type {
    FG_CLIENT_SESSION_CREATE = 1,
    FG_CLIENT_SESSION_UPDATE,
    FG_CLIENT_SESSION_RESUME,
    FG_CLIENT_ITEM_CREATE, /* conversation.item.create */
    FG_CLIENT_RESPONSE_CREATE,
    FG_CLIENT_RESPONSE_CANCEL,
    FG_CLIENT_SESSION_CLOSE,
    FG_CLIENT_ITEM_RETRIEVE, /* conversation.item.retrieve */
    FG_CLIENT_ITEM_DELETE,   /* conversation.item.delete */
    FG_CLIENT_ITEM_TRUNCATE, /* conversation.item.truncate */
} fg_client_event_type;

/* Sampling fields shared by session.* and response.create. Each has_* says the
 * client sent the field (JSON null counts as absent); values are in range. */
typedef struct fg_proto_sampling {
    bool has_temperature;
    double temperature;          /* [0, 2]; 0 = greedy */
    bool has_top_p;
    double top_p;                /* (0, 1]; 1 = off */
    bool has_top_k;
    uint32_t top_k;              /* [0, 1e6]; 0 = off */
    bool has_min_p;
    double min_p;                /* [0, 1); 0 = off */
    bool has_seed;
    uint64_t seed;               /* [0, 2^53] */
    bool has_max_output_tokens;
    uint32_t max_output_tokens;  /* [1, limits.max_output_tokens]; "inf" = the limit */
    bool has_stop;
    uint32_t n_stop;             /* 0..4; 0 with has_stop clears the list */
    fg_proto_str stop[FG_PROTO_MAX_STOP];
} fg_proto_sampling;

/* tool_choice of the OpenAI GA session. */
typedef enum fg_proto_tool_choice {
    FG_PROTO_TOOL_CHOICE_AUTO = 0,
    FG_PROTO_TOOL_CHOICE_NONE,
    FG_PROTO_TOOL_CHOICE_REQUIRED,
    FG_PROTO_TOOL_CHOICE_FUNCTION, /* {"type":"function","name":...} */
} fg_proto_tool_choice;

/* The wire word of a string tool_choice ("auto", "none", "required"); NULL
 * for FG_PROTO_TOOL_CHOICE_FUNCTION (an object) and out-of-range values. */
const char *fg_proto_tool_choice_word(fg_proto_tool_choice c);

/* session.create (fork_from allowed) and session.update. The OpenAI GA shape's
 * type ("realtime" only), output_modalities (["text"] only: audio is refused,
 * not dropped) and audio/tracing/include (ignored) are checked here. */
typedef struct fg_proto_session_params {
    bool has_instructions;
    fg_proto_str instructions;   /* <= limits.max_instructions_bytes */
    fg_proto_sampling sampling;
    bool has_model;
    fg_proto_str model;          /* 1..64 bytes; shown back, the one model is served whatever it says */
    bool has_tools;
    fg_proto_str tools;          /* the array as compact JSON (owned by the event); stored, not yet used */
    bool has_tool_choice;
    fg_proto_tool_choice tool_choice;
    fg_proto_str tool_choice_name; /* FUNCTION: the function's name */
    bool has_fork_from;
    fg_proto_str fork_from;      /* session.create only: a session id, 1..64 bytes */
} fg_proto_session_params;

typedef enum fg_proto_item_type {
    FG_PROTO_ITEM_MESSAGE = 1,
    FG_PROTO_ITEM_FUNCTION_CALL,
    FG_PROTO_ITEM_FUNCTION_CALL_OUTPUT,
} fg_proto_item_type;

typedef enum fg_proto_role {
    FG_PROTO_ROLE_SYSTEM = 1,
    FG_PROTO_ROLE_USER,
    FG_PROTO_ROLE_ASSISTANT,
} fg_proto_role;

typedef enum fg_proto_part_type {
    FG_PROTO_PART_INPUT_TEXT = 1,
    FG_PROTO_PART_OUTPUT_TEXT,
    FG_PROTO_PART_TEXT,
} fg_proto_part_type;

typedef struct fg_proto_part {
    fg_proto_part_type type;
    fg_proto_str text;           /* <= limits.max_text_bytes; may be empty */
} fg_proto_part;

/* A conversation item: parsed from conversation.item.create and written back
 * in conversation.item.added and response.done. Which fields mean something
 * depends on type; the others are zero. */
typedef struct fg_proto_item {
    fg_proto_item_type type;
    fg_proto_str id;             /* server-made "item_...", or the client's (1..32 bytes of [A-Za-z0-9_-]) */
    const char *status;          /* written as "status" when set (GA): "in_progress", "completed", "incomplete" */
    /* message */
    fg_proto_role role;
    uint32_t n_content;          /* 1..16 when parsed; the writer accepts 0 */
    fg_proto_part content[FG_PROTO_MAX_PARTS];
    /* function_call and function_call_output */
    fg_proto_str call_id;        /* 1..64 bytes */
    fg_proto_str name;           /* function_call: 1..64 bytes of [A-Za-z0-9_-] */
    fg_proto_str arguments;      /* function_call: <= limits.max_text_bytes */
    fg_proto_str output;         /* function_call_output: <= limits.max_text_bytes */
} fg_proto_item;

typedef struct fg_client_event {
    fg_client_event_type type;
    bool has_event_id;
    fg_proto_str event_id;       /* <= 64 bytes */
    union {
        fg_proto_session_params session; /* SESSION_CREATE, SESSION_UPDATE */
        struct {
            fg_proto_str session_id;       /* 1..64 bytes */
            uint64_t last_sequence_number; /* [0, 2^53] */
            bool allow_gap;                /* default false */
        } resume;                          /* SESSION_RESUME */
        fg_proto_item item;                /* ITEM_CREATE */
        struct {
            fg_proto_str item_id;          /* 1..64 bytes */
            uint32_t content_index;        /* TRUNCATE */
            uint64_t audio_end_ms;         /* TRUNCATE: required, as OpenAI has it; text has no audio */
            bool has_text_end;
            uint64_t text_end;             /* TRUNCATE: bytes of the part's text to keep (flashgate) */
        } item_ref;                        /* ITEM_RETRIEVE, ITEM_DELETE, ITEM_TRUNCATE */
        struct {
            bool generate;                 /* default true; false = only prefill */
            fg_proto_sampling sampling;    /* overrides for this response */
            bool out_of_band;              /* conversation: "none": the session's conversation is untouched */
            bool has_input;
            uint32_t n_input;              /* 0..16: the context instead of the conversation (out of band) */
            fg_proto_item input[FG_PROTO_MAX_INPUT];
            bool has_instructions;         /* out of band only */
            fg_proto_str instructions;
            bool has_metadata;
            fg_proto_str metadata;         /* compact JSON object (owned by the event), echoed back */
        } response;                        /* RESPONSE_CREATE */
        struct {
            bool has_response_id;
            fg_proto_str response_id;      /* 1..64 bytes */
        } cancel;                          /* RESPONSE_CANCEL */
    } u;
    bool has_previous_item_id;   /* ITEM_CREATE: must name the last item (items are appended) */
    fg_proto_str previous_item_id;
    struct json_t *root_;        /* private: owns every fg_proto_str above */
    char *owned_[2];             /* private: the compact JSON texts (tools, metadata) */
} fg_client_event;

/* The wire name of a client event type ("session.create"); NULL if unknown. */
const char *fg_client_event_type_name(fg_client_event_type t);

/* Parses and validates one client text message (buf need not be NUL-terminated).
 * Checks, in this order, and the first failure is reported: size
 * (frame_too_large), UTF-8 (invalid_utf8), JSON syntax, duplicate keys, nesting
 * deeper than lim->max_depth and unrepresentable numbers (invalid_json), a
 * top-level object (invalid_event), event_id (invalid_type/invalid_value), a
 * string "type" (invalid_event), a known type (unknown_event_type), then the
 * event's schema (missing_field, invalid_type, invalid_value). Unknown fields
 * are ignored. lim may be NULL (defaults).
 * Returns FG_OK with *out filled (release it with fg_client_event_free), or
 * FG_ERR_INVALID_ARG with *err filled (its event_id echoes the client's when it
 * was readable) and *out zeroed, or FG_ERR_NOMEM (err: internal_error). */
fg_err fg_proto_parse(const char *buf, size_t len, const fg_proto_limits *lim, fg_client_event *out,
                      fg_proto_error *err);

/* Releases what fg_proto_parse kept; safe on a zeroed or already freed event. */
void fg_client_event_free(fg_client_event *ev);

/* ---- server events ---- */

/* A growable output buffer with `pre` bytes of headroom before the payload
 * (LWS_PRE for lws_write). Each writer replaces the payload with one event:
 * the JSON text is at data + pre, len bytes, followed by a NUL. */
typedef struct fg_proto_buf {
    char *data;
    size_t pre;   /* headroom, fixed at init */
    size_t len;   /* payload bytes */
    size_t cap;   /* bytes allocated after the headroom */
} fg_proto_buf;

void fg_proto_buf_init(fg_proto_buf *b, size_t pre);
void fg_proto_buf_free(fg_proto_buf *b);
/* The payload (NUL-terminated); "" before the first write. */
const char *fg_proto_buf_text(const fg_proto_buf *b);

/* Appends a JSON string literal (quotes included) holding the bytes of s:
 * quote, backslash and control characters escaped, invalid UTF-8 replaced by
 * U+FFFD per maximal ill-formed subsequence, so the result is always valid
 * JSON and valid UTF-8. For other writers (the SSE endpoint). Errors: FG_ERR_NOMEM. */
fg_err fg_proto_buf_put_json_string(fg_proto_buf *b, const char *s, size_t n);

/* Replaces the "type" of the event in b (the first field, as every writer puts
 * it) with to: the Realtime beta names for old clients. Allocates only when b
 * must grow. Errors: FG_ERR_NOMEM, FG_ERR_INVALID_ARG (b holds no event). */
fg_err fg_proto_buf_rename_type(fg_proto_buf *b, const char *to);

/* The effective settings of a session, as session.created/updated/resumed show them. */
typedef struct fg_proto_session_info {
    const char *id;              /* "sess_..." */
    fg_proto_str instructions;
    double temperature, top_p, min_p;
    uint32_t top_k;
    bool has_seed;               /* false: written as null (a random seed per response) */
    uint64_t seed;
    uint32_t max_output_tokens;
    uint32_t n_stop;
    fg_proto_str stop[FG_PROTO_MAX_STOP];
    /* the OpenAI GA session's fields, written only when ga */
    bool ga;
    const char *model;
    const char *tools;           /* compact JSON array, or NULL ([]) */
    fg_proto_tool_choice tool_choice;
    const char *tool_choice_name;
} fg_proto_session_info;

typedef enum fg_proto_response_status {
    FG_PROTO_RESPONSE_COMPLETED = 1,
    FG_PROTO_RESPONSE_CANCELLED,
    FG_PROTO_RESPONSE_INCOMPLETE,
    FG_PROTO_RESPONSE_FAILED,
} fg_proto_response_status;

typedef struct fg_proto_usage {
    uint64_t input_tokens;   /* the context the response was computed from */
    uint64_t cached_tokens;  /* of input_tokens, already in the KV cache */
    uint64_t output_tokens;
} fg_proto_usage;

/* The GA fields of response.created and response.done (NULL in v1). */
typedef struct fg_proto_response_ga {
    const char *conversation_id;     /* NULL: null (an out-of-band response) */
    const char *metadata;            /* compact JSON object, or NULL (null) */
    uint32_t max_output_tokens;
} fg_proto_response_ga;

typedef struct fg_proto_response_done {
    const char *id;                  /* "resp_..." */
    const fg_proto_response_ga *ga;  /* GA fields, or NULL */
    fg_proto_response_status status;
    /* cancelled: "client_cancelled" | "session_closed" | "server_shutdown"; incomplete:
     * "max_output_tokens" | "context_length" | "content_filter"; NULL = no status_details */
    const char *reason;
    /* failed: status_details.error = {type, code, message} of this code */
    fg_proto_code error_code;
    const char *error_message;
    const fg_proto_item *output;     /* the items the response added (v1: 0 or 1) */
    size_t n_output;
    fg_proto_usage usage;
} fg_proto_response_done;

typedef struct fg_proto_rate_limit {
    const char *name;        /* "tokens", "daily_tokens", "sessions" */
    uint64_t limit, remaining;
    double reset_seconds;    /* until remaining is back at limit */
} fg_proto_rate_limit;

/* Writers. Each replaces b's payload with one server event: type, event_id
 * "evt_<evt>", sequence_number seq (0 = before a session exists, not
 * replayable), then the event's fields (docs/protocol.md "Server events").
 * Strings are escaped as fg_proto_buf_put_json_string does, so any bytes give
 * valid JSON. Errors: FG_ERR_NOMEM (b keeps its old memory; payload undefined). */
fg_err fg_proto_write_session_created(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_session_info *s);
fg_err fg_proto_write_session_updated(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_session_info *s);
fg_err fg_proto_write_session_resumed(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_session_info *s);
/* reason: "client_requested" | "resumed_elsewhere" | "evicted" (NULL = "client_requested") */
fg_err fg_proto_write_session_closed(fg_proto_buf *b, uint64_t seq, uint64_t evt, const char *session_id,
                                     const char *reason);
fg_err fg_proto_write_item_added(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_item *item);
fg_err fg_proto_write_response_created(fg_proto_buf *b, uint64_t seq, uint64_t evt, const char *response_id);
/* The GA flow's events (docs/protocol.md "The OpenAI GA flow"). */
fg_err fg_proto_write_response_created_ga(fg_proto_buf *b, uint64_t seq, uint64_t evt, const char *response_id,
                                          const fg_proto_response_ga *ga);
/* conversation.item.added / conversation.item.done with previous_item_id (NULL: null). */
fg_err fg_proto_write_item_ga(fg_proto_buf *b, bool done, uint64_t seq, uint64_t evt, const fg_proto_item *item,
                              const char *previous_item_id);
fg_err fg_proto_write_item_retrieved(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_item *item);
fg_err fg_proto_write_item_deleted(fg_proto_buf *b, uint64_t seq, uint64_t evt, const char *item_id);
fg_err fg_proto_write_item_truncated(fg_proto_buf *b, uint64_t seq, uint64_t evt, const char *item_id,
                                     uint32_t content_index, uint64_t audio_end_ms);
/* response.output_item.added / .done (output_index 0). */
/* response.output_item.added/done at an output index (a response's calls follow its message). */
fg_err fg_proto_write_output_item_at(fg_proto_buf *b, bool done, uint64_t seq, uint64_t evt, const char *response_id,
                                     uint32_t output_index, const fg_proto_item *item);
/* response.function_call_arguments.delta (text: the delta) or .done (name, text: all the arguments). */
fg_err fg_proto_write_call_args(fg_proto_buf *b, bool done, uint64_t seq, uint64_t evt, const char *response_id,
                                const char *item_id, uint32_t output_index, const char *call_id, const char *name,
                                const char *text, size_t n);
fg_err fg_proto_write_output_item(fg_proto_buf *b, bool done, uint64_t seq, uint64_t evt, const char *response_id,
                                  const fg_proto_item *item);
/* response.content_part.added / .done: part {"type":"text","text":...}. */
fg_err fg_proto_write_content_part(fg_proto_buf *b, bool done, uint64_t seq, uint64_t evt, const char *response_id,
                                   const char *item_id, const char *text, size_t n);
fg_err fg_proto_write_text_done(fg_proto_buf *b, uint64_t seq, uint64_t evt, const char *response_id,
                                const char *item_id, const char *text, size_t n);
/* The hot path: no snprintf, no allocation once b is big enough. bytes are raw
 * model output; pass them through fg_proto_utf8_carry_feed first so that a
 * character split across tokens is not replaced. */
fg_err fg_proto_write_text_delta(fg_proto_buf *b, uint64_t seq, uint64_t evt, const char *response_id,
                                 const char *item_id, const char *bytes, size_t n);
fg_err fg_proto_write_response_done(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_response_done *r);
fg_err fg_proto_write_rate_limits(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_rate_limit *rl,
                                  size_t n);
/* retry_after_s: seconds, written only when > 0. */
fg_err fg_proto_write_error(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_error *e,
                            uint32_t retry_after_s);

/* ---- UTF-8 ---- */

/* Model tokens are bytes: a multi-byte character may be split across tokens.
 * The carry holds an incomplete trailing sequence back until the next delta. */
typedef struct fg_proto_utf8_carry {
    uint8_t len;             /* 0..3 bytes held */
    unsigned char bytes[3];
} fg_proto_utf8_carry;

/* Writes to out (room for n + 3 bytes) the held bytes followed by bytes[0..n),
 * except an incomplete but so-far valid sequence at the end, which is held.
 * Invalid bytes pass through (the writers replace them). Returns bytes written. */
size_t fg_proto_utf8_carry_feed(fg_proto_utf8_carry *c, const char *bytes, size_t n, char *out);
/* At the end of a response: writes U+FFFD (3 bytes) to out if anything was held,
 * clears c, and returns 0 or 3. */
size_t fg_proto_utf8_carry_flush(fg_proto_utf8_carry *c, char *out);

/* Writes s[0..n) to out (room for 3n bytes) with every maximal ill-formed
 * subpart replaced by U+FFFD, as the writers show it; returns bytes written.
 * Text a session keeps is stored this way, so byte offsets into it (a
 * truncation's text_end) count what clients saw. */
size_t fg_proto_utf8_replace(const char *s, size_t n, char *out);

/* True when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or values
 * above U+10FFFF). NUL bytes are well-formed. */
bool fg_proto_utf8_valid(const char *s, size_t n);

#endif

/* openai_req.h: the parser of OpenAI's HTTP request bodies (openai_req.c):
 * POST /v1/chat/completions and POST /v1/responses into the session layer's
 * terms (instructions, message items, sampling). Pure: no gateway state, so the fuzz target runs it
 * as the server does. Any thread.
 */
#ifndef FG_GATEWAY_OPENAI_REQ_H
#define FG_GATEWAY_OPENAI_REQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "gateway/protocol.h"

#define GW_CHAT_MAX_MESSAGES 1024 /* messages of one request */

/* A refused request, in OpenAI's error shape: HTTP status, error.type,
 * error.code, error.param ("" = null) and error.message. */
typedef struct gw_oa_error {
    unsigned status;
    const char *type;  /* "invalid_request_error", ... */
    const char *code;  /* "invalid_json", "invalid_type", "invalid_value", "missing_field", "model_not_found", ... */
    char param[96];
    char message[256];
} gw_oa_error;

/* The request's function tools (validated by gateway/tool_decl.h) and tool_choice. */
typedef struct gw_oa_tools {
    char *json;              /* `tools` as compact JSON (owned), NULL: none given */
    size_t len;
    bool has_choice;
    fg_proto_tool_choice choice;
    char choice_name[FG_PROTO_MAX_ID_BYTES + 1]; /* FUNCTION */
} gw_oa_tools;

/* A chat completion request. Strings point into the parsed body (root_). */
typedef struct gw_chat_req {
    const char *model;
    char *instructions;      /* the leading system/developer messages, joined by a blank line (owned) */
    size_t instructions_len;
    fg_proto_item *items;    /* the messages after them, in order (owned array) */
    size_t n_items;
    fg_proto_sampling sampling;
    bool stream;
    bool include_usage;      /* stream_options.include_usage */
    gw_oa_tools tools;
    struct json_t *root_;    /* private: owns the strings */
} gw_chat_req;

/* Parses and validates body[len] against lim (text, output bounds) and the
 * one model the server serves (model_id; another is 404 model_not_found).
 * FG_OK and *out filled (free with gw_chat_req_free), or FG_ERR_INVALID_ARG (FG_ERR_NOMEM) with
 * *err saying what and where. Never reads past len. */
fg_err gw_chat_parse(const char *body, size_t len, const fg_proto_limits *lim, const char *model_id, gw_chat_req *out,
                     gw_oa_error *err);
void gw_chat_req_free(gw_chat_req *r);

/* A Responses request. Strings point into the parsed body (root_). */
typedef struct gw_resp_req {
    const char *model;
    const char *instructions;    /* NULL: none */
    size_t instructions_len;
    const char *previous_response_id; /* NULL: a new conversation */
    fg_proto_item *items;        /* input: a string is one user message (owned array) */
    size_t n_items;
    fg_proto_sampling sampling;  /* temperature, top_p, max_output_tokens */
    bool stream;
    bool store;                  /* default true: the response can be continued */
    gw_oa_tools tools;
    struct json_t *root_;
} gw_resp_req;

/* As gw_chat_parse, for POST /v1/responses. */
fg_err gw_resp_parse(const char *body, size_t len, const fg_proto_limits *lim, const char *model_id, gw_resp_req *out,
                     gw_oa_error *err);
void gw_resp_req_free(gw_resp_req *r);

/* A response.create message of the Responses WebSocket mode: the same
 * fields as POST /v1/responses beside "type": "response.create" (400
 * invalid_value, param "type", for another type); `stream` is implied. */
fg_err gw_resp_ws_parse(const char *text, size_t len, const fg_proto_limits *lim, const char *model_id,
                        gw_resp_req *out, gw_oa_error *err);

/* A client secret request (POST /v1/realtime/client_secrets): an empty body
 * or {"expires_after":{"anchor":"created_at","seconds":10..7200},"session":{...}}. */
#define GW_SECRET_TTL_DEFAULT_S 600
#define GW_SECRET_TTL_MIN_S 10
#define GW_SECRET_TTL_MAX_S 7200
typedef struct gw_secret_req {
    uint32_t ttl_s;            /* seconds until it expires */
    char *session_event;       /* the session as a session.update event's JSON, checked by the realtime
                                  parser (owned); NULL: no session settings */
    char *session_json;        /* the session as the reply shows it: type and model filled in (owned) */
} gw_secret_req;

/* As gw_chat_parse (404 model_not_found for another session.model; the
 * session's fields refused as a session.update would refuse them, with
 * param "session.<field>"). */
fg_err gw_secret_parse(const char *body, size_t len, const fg_proto_limits *lim, const char *model_id,
                       gw_secret_req *out, gw_oa_error *err);
void gw_secret_req_free(gw_secret_req *r);

#endif

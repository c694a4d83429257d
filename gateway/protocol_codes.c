/* protocol_codes.c: the error codes of the wire protocol, in one table.
 *
 * The table is the single source for the wire name, the error.type, whether a
 * retry_after goes with it, and a one-line meaning. docs/protocol.md has a row
 * per code with the same name and type; tests/unit/test_protocol.c checks that
 * they agree, so a code cannot be added here without being documented.
 */
#include "gateway/protocol.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define INVALID FG_PROTO_INVALID_REQUEST_ERROR
#define RATE FG_PROTO_RATE_LIMIT_ERROR
#define SERVER FG_PROTO_SERVER_ERROR

static const fg_proto_code_info code_table[FG_PROTO_CODE__COUNT] = {
    [FG_PROTO_INVALID_JSON] = {"invalid_json", INVALID, false, false,
                               "the message is not one JSON value (syntax, duplicate key, nesting, number range)"},
    [FG_PROTO_INVALID_UTF8] = {"invalid_utf8", INVALID, false, false, "the text message is not well-formed UTF-8"},
    [FG_PROTO_BINARY_NOT_SUPPORTED] = {"binary_not_supported", INVALID, false, false,
                                       "a binary message arrived; v1 events are text messages"},
    [FG_PROTO_FRAME_TOO_LARGE] = {"frame_too_large", INVALID, false, false,
                                  "the message is larger than the server's message limit"},
    [FG_PROTO_INVALID_EVENT] = {"invalid_event", INVALID, false, false,
                                "the message is not a JSON object with a string type"},
    [FG_PROTO_UNKNOWN_EVENT_TYPE] = {"unknown_event_type", INVALID, false, false,
                                     "type names no client event of this protocol version"},
    [FG_PROTO_MISSING_FIELD] = {"missing_field", INVALID, false, false, "a required field is absent or null"},
    [FG_PROTO_INVALID_TYPE] = {"invalid_type", INVALID, false, false, "a field has the wrong JSON type"},
    [FG_PROTO_INVALID_VALUE] = {"invalid_value", INVALID, false, false,
                                "a field has the right type but a value out of its range or set"},
    [FG_PROTO_NO_SESSION] = {"no_session", INVALID, false, false,
                             "the event needs a session and the connection has none"},
    [FG_PROTO_SESSION_EXISTS] = {"session_exists", INVALID, false, false,
                                 "the connection already has a session (one per connection)"},
    [FG_PROTO_SESSION_NOT_FOUND] = {"session_not_found", INVALID, false, false,
                                    "no such session for this API key (expired, closed or never existed)"},
    [FG_PROTO_SEQUENCE_EXPIRED] = {"sequence_expired", INVALID, false, false,
                                   "events after last_sequence_number are no longer in the resume buffer"},
    [FG_PROTO_RESPONSE_IN_PROGRESS] = {"response_in_progress", INVALID, false, false,
                                       "the session already has a response in progress"},
    [FG_PROTO_NO_RESPONSE_IN_PROGRESS] = {"no_response_in_progress", INVALID, false, false,
                                          "there is no response in progress (with that id) to cancel"},
    [FG_PROTO_CONTEXT_LENGTH_EXCEEDED] = {"context_length_exceeded", INVALID, false, false,
                                          "the conversation would not fit the context window"},
    [FG_PROTO_TOO_MANY_SESSIONS] = {"too_many_sessions", RATE, false, false,
                                    "the tenant's concurrent-session limit or the server's session table is full"},
    [FG_PROTO_RATE_LIMITED] = {"rate_limited", RATE, true, false,
                               "the connection sends events faster than allowed; the event was dropped"},
    [FG_PROTO_KV_UNAVAILABLE] = {"kv_unavailable", SERVER, true, false,
                                 "the engine has no KV cache memory for the session now"},
    [FG_PROTO_RATE_LIMIT_EXCEEDED] = {"rate_limit_exceeded", RATE, true, true,
                                      "the tenant's tokens-per-minute quota is spent"},
    [FG_PROTO_INSUFFICIENT_QUOTA] = {"insufficient_quota", RATE, true, true,
                                     "the tenant's daily token budget is spent"},
    [FG_PROTO_QUOTA_UNAVAILABLE] = {"quota_unavailable", SERVER, true, true,
                                    "the quota store is unreachable and the tenant is configured fail-closed"},
    [FG_PROTO_SHUTTING_DOWN] = {"shutting_down", SERVER, false, false,
                                "the server is draining; reconnect and resume on another instance or later"},
    [FG_PROTO_SESSION_LOST] = {"session_lost", SERVER, false, false,
                               "the session's saved state is damaged or from another model or format; it is gone"},
    [FG_PROTO_PERSIST_FAILED] = {"persist_failed", SERVER, false, false,
                                 "the session could not be saved (disk full or I/O); it stays usable in memory"},
    [FG_PROTO_INTERNAL_ERROR] = {"internal_error", SERVER, false, false, "the server failed; the event had no effect"},
    [FG_PROTO_TOOL_CALL_INVALID] = {"tool_call_invalid", SERVER, false, false,
                                    "the model's tool call cannot be used (malformed, undeclared, or against "
                                    "tool_choice); the call is not taken"},
    [FG_PROTO_SESSION_ELSEWHERE] = {"session_elsewhere", INVALID, false, false,
                                    "another live instance holds the session; error.location names it: resume there"},
    [FG_PROTO_SESSION_TAKEN] = {"session_taken", INVALID, false, false,
                                "another instance adopted the session first; error.location names it: resume there"},
    [FG_PROTO_SESSION_MOVED] = {"session_moved", SERVER, false, false,
                                "this instance no longer holds the session (its lease expired and another took it)"},
};

const fg_proto_code_info *fg_proto_code_info_get(fg_proto_code c)
{
    if ((unsigned)c >= FG_PROTO_CODE__COUNT || !code_table[c].name)
        return NULL;
    return &code_table[c];
}

const char *fg_proto_error_code_name(fg_proto_code c)
{
    const fg_proto_code_info *i = fg_proto_code_info_get(c);
    /* An out-of-range code is our bug, never the client's: say so on the wire. */
    return i ? i->name : "internal_error";
}

const char *fg_proto_error_type_name(fg_proto_error_type t)
{
    switch (t) {
    case FG_PROTO_INVALID_REQUEST_ERROR:
        return "invalid_request_error";
    case FG_PROTO_RATE_LIMIT_ERROR:
        return "rate_limit_error";
    case FG_PROTO_SERVER_ERROR:
        break;
    }
    return "server_error";
}

fg_proto_code fg_proto_error_code_from_name(const char *name)
{
    if (!name)
        return FG_PROTO_OK;
    for (int c = 1; c < FG_PROTO_CODE__COUNT; c++)
        if (code_table[c].name && strcmp(code_table[c].name, name) == 0)
            return (fg_proto_code)c;
    return FG_PROTO_OK;
}

fg_err fg_proto_error_set(fg_proto_error *err, fg_proto_code code, const char *param, const char *event_id,
                          const char *fmt, ...)
{
    if (!err)
        return FG_ERR_INVALID_ARG;
    err->code = code;
    err->message[0] = '\0';
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    /* Cut silently: a param is our own path and event_id was checked to be
     * <= 64 bytes by the parser, so cuts only guard against caller mistakes. */
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    err->has_event_id = event_id != NULL;
    snprintf(err->event_id, sizeof err->event_id, "%s", event_id ? event_id : "");
    err->location_instance[0] = err->location_url[0] = '\0';
    return FG_ERR_INVALID_ARG;
}

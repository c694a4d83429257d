/* client_events.h: the client's side of protocol v1's JSON (docs/protocol.md).
 *
 * Writes client events (session.create, conversation.item.create, ...) as
 * compact JSON text, and reads server events into a small view with a dotted
 * path accessor. The server's writers and parser are in protocol.h; this is
 * their mirror image for flashgate-cli and tests, built on jansson.
 *
 * Threads: no global state; every function is reentrant.
 * Memory: writers return malloc'd, NUL-terminated text the caller frees (NULL
 * when out of memory); fg_client_ev_parse's view owns a JSON tree released by
 * fg_client_ev_release.
 */
#ifndef FG_GATEWAY_CLIENT_EVENTS_H
#define FG_GATEWAY_CLIENT_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"

/* Sampling settings a client may set in session.create or response.create;
 * each has_* says the field is written. */
typedef struct fg_client_sampling {
    bool has_temperature;
    double temperature;
    bool has_top_p;
    double top_p;
    bool has_top_k;
    uint32_t top_k;
    bool has_min_p;
    double min_p;
    bool has_seed;
    uint64_t seed;
    bool has_max_output_tokens;
    uint32_t max_output_tokens;
} fg_client_sampling;

/* Writers. event_id may be NULL (not written). Text arguments are bytes:
 * invalid UTF-8 is replaced by U+FFFD so the event is always valid JSON. */
char *fg_client_ev_session_create(const char *event_id, const char *instructions, const fg_client_sampling *s);
char *fg_client_ev_session_resume(const char *event_id, const char *session_id, uint64_t last_sequence_number);
char *fg_client_ev_session_close(const char *event_id);
/* conversation.item.create of one message with one input_text part; role "user" if NULL. */
char *fg_client_ev_message(const char *event_id, const char *role, const char *text, size_t len);
/* response.create; s may be NULL (no overrides). */
char *fg_client_ev_response_create(const char *event_id, const fg_client_sampling *s);
char *fg_client_ev_response_cancel(const char *event_id);

/* A parsed server event. */
typedef struct fg_client_event_view {
    struct json_t *root;     /* the event object */
    const char *type;        /* "" when absent or not a string */
    bool has_seq;
    uint64_t seq;            /* sequence_number */
} fg_client_event_view;

/* Parses one server message. Errors: FG_ERR_INVALID_ARG (not a JSON object;
 * diag has jansson's message); the view is then empty but safe to release. */
fg_err fg_client_ev_parse(const char *text, size_t len, fg_client_event_view *ev, fg_diag *diag);
void fg_client_ev_release(fg_client_event_view *ev);

/* The value at a dotted path of object keys ("response.usage.output_tokens").
 * str: NULL unless a string. num: dflt unless a number. */
const char *fg_client_ev_str(const fg_client_event_view *ev, const char *path);
double fg_client_ev_num(const fg_client_event_view *ev, const char *path, double dflt);

/* One line about an error event, or a failed response.done's error:
 * "code: message (param p)". Writes "" when ev has neither. */
void fg_client_ev_describe_error(const fg_client_event_view *ev, char *out, size_t cap);

/* The "type" of a server message without a full parse: flashgate writes it as
 * the first key. Copies it to out (NUL-terminated) and returns true; false when
 * the message does not start that way (parse it instead). */
bool fg_client_ev_peek_type(const char *text, size_t len, char *out, size_t cap);

#endif

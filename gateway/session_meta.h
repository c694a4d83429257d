/* session_meta.h: the gateway's record of a session's settings, kept in the
 * engine's session file (fg_session_set_meta) so that a session restored
 * after a restart gets back what session.resumed shows and what its next
 * response needs: tenant, instructions, sampling defaults, stop strings, the
 * event and id counters, and the conversation's tokens when they fit.
 *
 * Format (little-endian, version 1):
 *   "FGSM" u16 version u16 flags (bit 0 has_seed, 1 rebuild, 2 conv_known,
 *   3..5 the tail: what the conversation's tokens leave open, chat_template.h)
 *   u8 len + tenant id
 *   f64 temperature, top_p, min_p; u32 top_k; u64 seed; u32 max_output_tokens
 *   u8 n_stop, then per stop: u8 len + bytes
 *   u32 len + instructions
 *   u64 next_seq, evt_counter, item_counter, resp_counter (the id counters are
 *   the first ids a restored session may use: gw_persist.c writes a
 *   reservation above those handed out)
 *   u32 cached_tokens (engine cache length when written), u32 n_conv,
 *   n_conv tokens as unsigned LEB128 varints
 * The conversation is left out (n_conv 0, flag CONV_KNOWN clear) when it
 * would not fit the 64 KiB the engine keeps; only an instructions change
 * after a restore needs it.
 *
 * Pure functions; safe from any thread.
 */
#ifndef FG_SESSION_META_H
#define FG_SESSION_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "gateway/chat_template.h"
#include "gateway/protocol.h"

#define FG_SESSION_META_VERSION 1
#define FG_SESSION_META_MAX_BYTES 65536 /* the engine's limit on an owner record */

typedef struct fg_session_meta {
    char tenant[65];                /* tenant id, 1..64 bytes */
    const char *instructions;       /* encode: the caller's; decode: malloc'd, NUL-terminated */
    size_t instructions_len;
    double temperature, top_p, min_p;
    uint32_t top_k;
    bool has_seed;
    uint64_t seed;
    uint32_t max_output_tokens;
    uint32_t n_stop;
    char stop[FG_PROTO_MAX_STOP][FG_PROTO_MAX_STOP_BYTES + 1];
    uint64_t next_seq, evt_counter, item_counter, resp_counter; /* the id counters: reservations */
    uint32_t cached_tokens;         /* tokens in the engine's cache when the record was made */
    bool rebuild;                   /* instructions changed since the cache was built */
    bool conv_known;                /* conv holds the conversation after the head */
    fg_template_tail tail;          /* what the conversation the record covers leaves open for the next item */
    fg_tokens conv;                 /* encode: the caller's; decode: owned (fg_session_meta_free) */
} fg_session_meta;

/* Writes the record into buf[0..cap); *len gets its length. The conversation
 * is dropped (conv_known false in the record) when it does not fit.
 * Errors: FG_ERR_INVALID_ARG (tenant or stop strings out of range, or the
 * record does not fit cap even without the conversation). */
fg_err fg_session_meta_encode(const fg_session_meta *m, uint8_t *buf, size_t cap, size_t *len, fg_diag *diag);

/* Parses and validates a record; on success *m owns its instructions and conv
 * (free with fg_session_meta_free). On error *m owns nothing.
 * Errors: FG_ERR_UNSUPPORTED (another record version, e.g. written by a newer
 * gateway), FG_ERR_INVALID_ARG (not a record, truncated, or a field out of
 * range), FG_ERR_NOMEM. */
fg_err fg_session_meta_decode(const uint8_t *buf, size_t len, fg_session_meta *m, fg_diag *diag);

void fg_session_meta_free(fg_session_meta *m);

#endif

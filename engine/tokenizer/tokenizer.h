/* tokenizer.h: byte-level BPE (GPT-2 style) from a GGUF's tokenizer.ggml.* metadata.
 *
 * Reads tokenizer.ggml.model (must be "gpt2"), .pre (optional), .tokens,
 * .token_type (optional), .merges, .bos_token_id, .eos_token_id,
 * .add_bos_token (optional). Token strings use GPT-2's byte-to-unicode mapping,
 * so every byte 0..255 has a token and encode/decode round-trips any byte
 * string exactly.
 *
 * Encoding: text is split into pieces by the pre-tokenizer tokenizer.ggml.pre
 * names (engine/tokenizer/pretokenize.h: deepseek-v3, deepseek-llm, deepseek-coder,
 * gpt-2; "gpt2" or no key: the byte-class splitter of older generated models);
 * each piece is merged by merge rank. Control (type 3) and user-defined
 * (type 4) tokens are matched in the text only when the caller asks.
 *
 * Owns: its own copies of the vocabulary (independent of the gguf_t lifetime).
 * Thread safety: immutable after create; encode/decode may run concurrently.
 */
#ifndef FG_TOKENIZER_H
#define FG_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/model/gguf.h"

typedef struct fg_tokenizer fg_tokenizer_t;

/* Errors: FG_ERR_TOKENIZER (missing/invalid keys, an unknown
 * tokenizer.ggml.pre, a byte without a token, a merge naming unknown tokens,
 * ids out of range), FG_ERR_NOMEM. */
fg_err fg_tokenizer_create(const fg_gguf_t *g, fg_tokenizer_t **out, fg_diag *diag);
void fg_tokenizer_destroy(fg_tokenizer_t *t);

int32_t fg_tokenizer_vocab_size(const fg_tokenizer_t *t);
int32_t fg_tokenizer_bos(const fg_tokenizer_t *t);   /* -1 if none */
int32_t fg_tokenizer_eos(const fg_tokenizer_t *t);   /* -1 if none */
bool fg_tokenizer_add_bos(const fg_tokenizer_t *t);  /* tokenizer.ggml.add_bos_token, default true */

/* Encodes len bytes. Writes at most cap ids to out and always sets *n_out to the
 * number needed; returns FG_ERR_INVALID_ARG when cap is too small (call again
 * with a bigger buffer). add_bos prepends BOS when the vocabulary has one.
 * parse_special: the texts of control and user-defined tokens in the input
 * become those tokens, matched as Hugging Face's tokenizers match added tokens
 * (leftmost, longest at a position; the text between is split and merged on its
 * own). Without it no text becomes such a token (stricter than llama.cpp, which
 * still matches user-defined ones): what a user typed stays plain text. */
fg_err fg_tokenizer_encode(const fg_tokenizer_t *t, const char *text, size_t len, bool add_bos,
                           bool parse_special, int32_t *out, size_t cap, size_t *n_out);

/* A byte range [start, end) of an encode input. */
typedef struct fg_tok_span {
    size_t start;
    size_t end;
} fg_tok_span;

/* As fg_tokenizer_encode with parse_special, except that a special token is
 * matched only where its whole text lies inside one of the n spans (sorted,
 * non-overlapping, within len); elsewhere the same bytes stay plain text. The
 * text between matched specials is split and merged as one run, whoever wrote
 * it, so a chat prompt whose template-written markers are the spans encodes
 * exactly as the reference tokenizer encodes the whole string when the other
 * text holds no marker. Errors: as fg_tokenizer_encode; FG_ERR_INVALID_ARG for
 * spans that are unsorted, overlapping or past len. */
fg_err fg_tokenizer_encode_spans(const fg_tokenizer_t *t, const char *text, size_t len, const fg_tok_span *spans,
                                 size_t n_spans, int32_t *out, size_t cap, size_t *n_out);

/* The control or user-defined token whose text is exactly s[0..len), or -1. */
int32_t fg_tokenizer_special_id(const fg_tokenizer_t *t, const char *s, size_t len);

/* Bytes of one token (control tokens decode to their text only when
 * render_special, else to nothing). Returns FG_ERR_TOKEN_ID for a bad id.
 * *len is set to the byte count; ptr stays valid for the tokenizer's life. */
fg_err fg_tokenizer_token_bytes(const fg_tokenizer_t *t, int32_t id, bool render_special,
                                const char **ptr, size_t *len);

/* Decodes ids into buf (NUL-terminated when it fits); *n_out gets the bytes
 * needed (excluding NUL); FG_ERR_INVALID_ARG when cap is too small. */
fg_err fg_tokenizer_decode(const fg_tokenizer_t *t, const int32_t *ids, size_t n, bool render_special,
                           char *buf, size_t cap, size_t *n_out);

/* Token string as stored in the vocabulary (GPT-2 unicode form), for tools. */
const char *fg_tokenizer_token_text(const fg_tokenizer_t *t, int32_t id);

#endif

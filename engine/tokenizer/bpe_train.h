/* bpe_train.h: a small, deterministic byte-level BPE trainer for the model
 * generator's vocabularies.
 *
 * The text is split into pieces as tokenizer.ggml.pre "gpt-2" splits it
 * (engine/tokenizer/pretokenize.h), the splitter of the vocabularies the model generator
 * writes, so merges never cross a piece boundary; on the built-in corpus, which
 * is ASCII, the older "gpt2" byte-class splitter gives the same pieces, so
 * either name yields the same vocabulary. Each piece starts as
 * its bytes (token ids 0..255 are the bytes in byte order). Each round counts
 * the adjacent pairs over all pieces and merges the most frequent one
 * everywhere, ties broken by the smallest (left id, right id). Merge i creates
 * token 256 + i. A pair whose concatenation already is a token (the same bytes
 * reached by another split) is skipped for good, so token texts stay unique and
 * the vocabulary is exactly 256 + n_merges tokens.
 *
 * Token texts are GPT-2 byte-to-unicode strings (engine/tokenizer/byte_unicode.h), as a
 * GGUF vocabulary stores them; they never contain NUL or a plain space.
 *
 * Owns: the fg_bpe_vocab it fills (freed with fg_bpe_vocab_free).
 * Thread safety: pure apart from its output; any thread.
 */
#ifndef FG_BPE_TRAIN_H
#define FG_BPE_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"

#define FG_BPE_BYTE_TOKENS 256

typedef struct fg_bpe_vocab {
    uint32_t n_tokens;     /* 256 + n_merges */
    uint32_t n_merges;
    char **text;           /* [n_tokens] NUL-terminated byte-mapped UTF-8 text of each token */
    uint32_t (*merge)[2];  /* [n_merges] {left id, right id}; merge i made token 256 + i */
} fg_bpe_vocab;

/* Learns n_merges merges from len bytes of text (any bytes; not necessarily
 * valid UTF-8). On success *out owns its arrays; on error *out is left empty.
 * Errors: FG_ERR_INVALID_ARG (the text runs out of mergeable pairs before
 * n_merges; the message says how many it reached), FG_ERR_NOMEM. */
fg_err fg_bpe_train(const char *text, size_t len, uint32_t n_merges, fg_bpe_vocab *out, fg_diag *diag);

/* Frees the arrays of v and zeroes it; NULL or an empty vocab is fine. */
void fg_bpe_vocab_free(fg_bpe_vocab *v);

/* The built-in training text (original English prose about inference engines
 * plus a little code-like text, a few KB). Returns it and sets *len. */
const char *fg_bpe_builtin_corpus(size_t *len);

#endif

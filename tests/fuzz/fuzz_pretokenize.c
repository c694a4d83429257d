/* fuzz_pretokenize.c: libFuzzer target for the pre-tokenizers.
 *
 * Splits the input (any bytes: ill-formed UTF-8 included) with every kind of
 * engine/tokenizer/pretokenize.h and checks the contract: each piece is non-empty and
 * starts where the previous one ended, and the pieces cover the input exactly,
 * so concatenated they are the input. A broken contract aborts (a crash for
 * libFuzzer).
 *
 * The seed corpus is tests/fuzz/corpus/fuzz_pretokenize/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/tokenizer/pretokenize.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct cursor {
    size_t at; /* end of the last piece */
    size_t size;
} cursor;

static int piece(void *ctx, size_t start, size_t end)
{
    cursor *c = ctx;
    if (start != c->at || end <= start || end > c->size) {
        fprintf(stderr, "bad piece [%zu, %zu) after %zu of %zu\n", start, end, c->at, c->size);
        abort();
    }
    c->at = end;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const fg_pretok_kind kinds[] = {FG_PRETOK_LEGACY, FG_PRETOK_GPT2, FG_PRETOK_DEEPSEEK3,
                                           FG_PRETOK_DEEPSEEK_LLM, FG_PRETOK_DEEPSEEK_CODER};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        cursor c = {0, size};
        if (fg_pretok_split(kinds[k], (const char *)data, size, piece, &c) != 0 || c.at != size) {
            fprintf(stderr, "kind %d covered %zu of %zu bytes\n", (int)kinds[k], c.at, size);
            abort();
        }
    }
    return 0;
}

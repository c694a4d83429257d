/* flashgate-tokenize: encodes a text file with a GGUF's tokenizer and writes
 * the token ids (u32, little-endian), for training (engine/tools/train/) and
 * for perplexity runs (flashgate-perplexity).
 *
 * --docs: the input is a fortune-style file, documents separated by lines that
 * hold only "%"; each document is written as BOS, its tokens, EOS, so a model
 * trained on the ids starts and ends texts where the engine's prompts do.
 * Without --docs the whole file is encoded as one text, without BOS.
 * Special-token texts in the input stay plain text (no parse_special).
 *
 * Exit status: 0 on success, 1 on an error, 2 on a bad command line.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/file.h"
#include "engine/model/gguf.h"
#include "engine/tokenizer/tokenizer.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ids are written in host order; the format is little-endian"
#endif

static void usage(FILE *f)
{
    fprintf(f, "usage: flashgate-tokenize --model GGUF --in TEXT --out IDS [--docs]\n"
               "  --docs   documents separated by lines holding only '%%'; each becomes BOS tokens EOS\n");
}

static int fail(const char *what, const char *arg)
{
    fprintf(stderr, "flashgate-tokenize: %s%s\n", what, arg ? arg : "");
    return 1;
}

/* Encodes text[0..len) (plus BOS/EOS when bos/eos >= 0) and appends it to out. */
static int emit(const fg_tokenizer_t *tok, const char *text, size_t len, int32_t bos, int32_t eos, FILE *out,
                int32_t **ids, size_t *cap, size_t *total)
{
    size_t need = len + 2; /* byte-level BPE: at most one token per byte */
    if (need > *cap) {
        int32_t *n = realloc(*ids, need * sizeof *n);
        if (!n)
            return -1;
        *ids = n;
        *cap = need;
    }
    size_t k = 0, got = 0;
    if (bos >= 0)
        (*ids)[k++] = bos;
    if (len && fg_tokenizer_encode(tok, text, len, false, false, *ids + k, *cap - k, &got) != FG_OK)
        return -1;
    k += got;
    if (eos >= 0)
        (*ids)[k++] = eos;
    for (size_t i = 0; i < k; i++) {
        uint32_t v = (uint32_t)(*ids)[i];
        if (fwrite(&v, 4, 1, out) != 1)
            return -1;
    }
    *total += k;
    return 0;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *in = NULL, *outp = NULL;
    int docs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--docs")) {
            docs = 1;
        } else if (i + 1 < argc && !strcmp(a, "--model")) {
            model = argv[++i];
        } else if (i + 1 < argc && !strcmp(a, "--in")) {
            in = argv[++i];
        } else if (i + 1 < argc && !strcmp(a, "--out")) {
            outp = argv[++i];
        } else {
            fprintf(stderr, "flashgate-tokenize: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model || !in || !outp) {
        usage(stderr);
        return 2;
    }

    fg_diag d = {{0}};
    fg_gguf_t *g = NULL;
    fg_tokenizer_t *tok = NULL;
    if (fg_gguf_open_file(model, &g, &d) != FG_OK || fg_tokenizer_create(g, &tok, &d) != FG_OK) {
        fprintf(stderr, "flashgate-tokenize: %s\n", d.msg);
        fg_gguf_close(g);
        return 1;
    }
    fg_gguf_close(g);
    size_t len = 0;
    char *text = NULL;
    if (fg_file_read(in, SIZE_MAX - 1, &text, &len)) {
        fg_tokenizer_destroy(tok);
        return fail("cannot read ", in);
    }
    FILE *out = fopen(outp, "wb");
    if (!out) {
        free(text);
        fg_tokenizer_destroy(tok);
        return fail("cannot create ", outp);
    }

    int rc = 0;
    int32_t *ids = NULL;
    size_t cap = 0, total = 0, n_docs = 0;
    if (!docs) {
        rc = emit(tok, text, len, -1, -1, out, &ids, &cap, &total);
    } else {
        const int32_t bos = fg_tokenizer_bos(tok), eos = fg_tokenizer_eos(tok);
        size_t start = 0, pos = 0;
        while (rc == 0 && pos <= len) {
            /* a line is [pos, eol); a separator line ends the document before it */
            size_t eol = pos;
            while (eol < len && text[eol] != '\n')
                eol++;
            int sep = eol - pos == 1 && text[pos] == '%';
            if (sep || eol >= len) {
                size_t end = sep ? pos : len;
                if (end > start) {
                    rc = emit(tok, text + start, end - start, bos, eos, out, &ids, &cap, &total);
                    n_docs++;
                }
                start = eol + 1;
            }
            pos = eol + 1;
        }
    }
    if (fclose(out) != 0)
        rc = -1;
    free(ids);
    free(text);
    fg_tokenizer_destroy(tok);
    if (rc)
        return fail("encoding or writing failed for ", outp);
    printf("%s: %zu bytes -> %zu tokens", in, len, total);
    if (docs)
        printf(" in %zu documents", n_docs);
    printf("\n");
    return 0;
}

/* hf_tokcheck.c: the C half of the check against the real DeepSeek-V3
 * tokenizer (tests/tokenizer/check_deepseek_v3.sh runs it).
 *
 *   hf_tokcheck convert TOKENIZER_JSON TOKENIZER_CONFIG_JSON VOCAB_SIZE PRE OUT.gguf
 *       writes a vocabulary-only GGUF from a Hugging Face tokenizer.json the
 *       way llama.cpp's convert_hf_to_gguf.py writes one (get_vocab_base and
 *       gguf-py's SpecialVocab): one token per id below VOCAB_SIZE (config.json's
 *       vocab_size), ids the tokenizer lacks as UNUSED "[PAD<id>]"; added tokens
 *       CONTROL when special or when they look special (<|...|>, <｜...｜>, ...),
 *       else USER_DEFINED with U+2581 written as a space; merges as they are;
 *       bos/eos ids and add_bos/add_eos from tokenizer_config.json.
 *   hf_tokcheck check VOCAB.gguf CASES
 *       CASES has one line per string: its UTF-8 bytes in hex, a tab, and the
 *       ids Hugging Face's tokenizer gave (added tokens matched, no BOS).
 *       Encodes each with parse_special and compares; also decodes the
 *       expected ids and compares with the string. Prints every mismatch (up to
 *       a limit) and "matched M of N"; exits 1 unless all match.
 *   hf_tokcheck roundtrip VOCAB.gguf COUNT SEED
 *       random byte strings -> ids -> bytes, with and without parse_special.
 *   hf_tokcheck pieces CASES
 *       CASES lines: a tokenizer.ggml.pre name, a tab, a string's UTF-8 bytes
 *       in hex, a tab, the byte offsets where its pieces end (as a regex engine
 *       split it, tests/tokenizer/regex_split.mjs); compares with
 *       fg_pretok_split. Exits 1 unless all agree.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "engine/tokenizer/pretokenize.h"
#include "engine/tokenizer/tokenizer.h"

enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5 };

static int fail(const char *what, const char *detail)
{
    fprintf(stderr, "hf_tokcheck: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    return 2;
}

static bool starts_ends(const char *s, const char *a, const char *b)
{
    size_t n = strlen(s), na = strlen(a), nb = strlen(b);
    return n >= na + nb && memcmp(s, a, na) == 0 && memcmp(s + n - nb, b, nb) == 0;
}

/* convert_hf_to_gguf.py's does_token_look_special. */
static bool looks_special(const char *t)
{
    return !strcmp(t, "<pad>") || !strcmp(t, "<mask>") || !strcmp(t, "<2mass>") ||
           !strcmp(t, "[@BOS@]") || starts_ends(t, "<|", "|>") ||
           starts_ends(t, "<\xef\xbd\x9c", "\xef\xbd\x9c>") || starts_ends(t, "<unused", ">");
}

/* A copy of s with every U+2581 replaced by a space. */
static char *lower_one_eighth_to_space(const char *s)
{
    char *o = malloc(strlen(s) + 1), *p = o;
    if (!o)
        return NULL;
    while (*s) {
        if (!strncmp(s, "\xe2\x96\x81", 3)) {
            *p++ = ' ';
            s += 3;
        } else {
            *p++ = *s++;
        }
    }
    *p = '\0';
    return o;
}

/* The id of the added token whose content is the config's bos/eos token. */
static int config_token_id(json_t *config, const char *key, json_t *added)
{
    json_t *v = json_object_get(config, key);
    const char *content = json_is_string(v) ? json_string_value(v)
                                            : json_string_value(json_object_get(v, "content"));
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        if (content && !strcmp(json_string_value(json_object_get(a, "content")), content))
            return (int)json_integer_value(json_object_get(a, "id"));
    }
    return -1;
}

static int convert(const char *tok_path, const char *cfg_path, long vocab_size, const char *pre,
                   const char *out)
{
    json_error_t je;
    json_t *tj = json_load_file(tok_path, 0, &je), *cfg = json_load_file(cfg_path, 0, &je);
    if (!tj || !cfg)
        return fail("cannot parse", je.text);
    json_t *vocab = json_object_get(json_object_get(tj, "model"), "vocab");
    json_t *merges = json_object_get(json_object_get(tj, "model"), "merges");
    json_t *added = json_object_get(tj, "added_tokens");
    if (!json_is_object(vocab) || !json_is_array(merges) || !json_is_array(added) || vocab_size <= 0)
        return fail("tokenizer.json lacks model.vocab, model.merges or added_tokens", NULL);

    const char **tokens = calloc((size_t)vocab_size, sizeof *tokens);
    char **owned = calloc((size_t)vocab_size, sizeof *owned);
    int32_t *types = calloc((size_t)vocab_size, sizeof *types);
    size_t n_merges = json_array_size(merges);
    char **merge_text = calloc(n_merges + 1, sizeof *merge_text);
    if (!tokens || !owned || !types || !merge_text)
        return fail("out of memory", NULL);
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        json_int_t id = json_integer_value(v);
        if (id >= 0 && id < vocab_size) {
            tokens[id] = key;
            types[id] = TT_NORMAL;
        }
    }
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        json_int_t id = json_integer_value(json_object_get(a, "id"));
        const char *content = json_string_value(json_object_get(a, "content"));
        if (id < 0 || id >= vocab_size || !content)
            continue;
        if (json_is_true(json_object_get(a, "special")) || looks_special(content)) {
            tokens[id] = content;
            types[id] = TT_CONTROL;
        } else {
            tokens[id] = owned[id] = lower_one_eighth_to_space(content);
            types[id] = TT_USER;
        }
    }
    for (long id = 0; id < vocab_size; id++) {
        if (!tokens[id]) {
            char pad[32];
            snprintf(pad, sizeof pad, "[PAD%ld]", id);
            tokens[id] = owned[id] = strdup(pad);
            types[id] = TT_UNUSED;
        }
    }
    json_array_foreach(merges, i, a) {
        if (json_is_string(a)) {
            merge_text[i] = strdup(json_string_value(a));
        } else { /* newer files: ["left", "right"] */
            const char *l = json_string_value(json_array_get(a, 0)), *r = json_string_value(json_array_get(a, 1));
            size_t nl = l ? strlen(l) : 0, nr = r ? strlen(r) : 0;
            merge_text[i] = malloc(nl + nr + 2);
            if (merge_text[i])
                snprintf(merge_text[i], nl + nr + 2, "%s %s", l ? l : "", r ? r : "");
        }
        if (!merge_text[i])
            return fail("out of memory", NULL);
    }

    int bos = config_token_id(cfg, "bos_token", added), eos = config_token_id(cfg, "eos_token", added);
    fg_diag d = {{0}};
    fg_gguf_writer_t *w;
    fg_err e = fg_gguf_writer_create(out, 0, &w, &d);
    if (!e)
        e = fg_gguf_writer_add_str(w, "general.architecture", "deepseek2");
    if (!e)
        e = fg_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    if (!e)
        e = fg_gguf_writer_add_str(w, "tokenizer.ggml.pre", pre);
    if (!e)
        e = fg_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tokens, NULL, (uint64_t)vocab_size);
    if (!e)
        e = fg_gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)vocab_size);
    if (!e)
        e = fg_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merge_text, NULL,
                                       n_merges);
    if (!e && bos >= 0)
        e = fg_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (!e && eos >= 0)
        e = fg_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (!e && json_is_boolean(json_object_get(cfg, "add_bos_token")))
        e = fg_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token",
                                    json_is_true(json_object_get(cfg, "add_bos_token")));
    if (!e && json_is_boolean(json_object_get(cfg, "add_eos_token")))
        e = fg_gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token",
                                    json_is_true(json_object_get(cfg, "add_eos_token")));
    if (!e)
        e = fg_gguf_writer_begin_data(w, &d);
    if (!e)
        e = fg_gguf_writer_finish(w, &d);
    if (w)
        fg_gguf_writer_destroy(w);
    for (long id = 0; id < vocab_size; id++)
        free(owned[id]);
    for (i = 0; i < n_merges; i++)
        free(merge_text[i]);
    free(tokens);
    free(owned);
    free(types);
    free(merge_text);
    json_decref(tj);
    json_decref(cfg);
    if (e)
        return fail("writing the GGUF", d.msg[0] ? d.msg : fg_err_name(e));
    printf("wrote %s: %ld tokens, %zu merges, pre \"%s\", bos %d, eos %d\n", out, vocab_size, n_merges,
           pre, bos, eos);
    return 0;
}

static int open_tok(const char *path, fg_gguf_t **g, fg_tokenizer_t **t)
{
    fg_diag d = {{0}};
    if (fg_gguf_open_file(path, g, &d) != FG_OK || fg_tokenizer_create(*g, t, &d) != FG_OK)
        return fail(path, d.msg);
    return 0;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The string as a C-like literal, cut at 120 bytes, for a mismatch report. */
static void show(const char *s, size_t n)
{
    fputc('"', stdout);
    for (size_t i = 0; i < n && i < 120; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\r')
            fputs("\\r", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c < 0x20 || c == '"' || c == '\\')
            printf("\\x%02x", c);
        else
            fputc(c, stdout);
    }
    fputs(n > 120 ? "\"..." : "\"", stdout);
}

static void show_ids(const char *label, const int32_t *ids, size_t n)
{
    printf("    %s:", label);
    for (size_t i = 0; i < n && i < 40; i++)
        printf(" %d", ids[i]);
    puts(n > 40 ? " ..." : "");
}

static int check(const char *vocab, const char *cases_path)
{
    fg_gguf_t *g;
    fg_tokenizer_t *t;
    if (open_tok(vocab, &g, &t))
        return 2;
    size_t cap_line = 1 << 20, n_cases = 0, n_ok = 0, shown = 0;
    char *line = malloc(cap_line), *text = malloc(cap_line), *back = malloc(cap_line);
    int32_t *want = malloc(cap_line * sizeof *want), *got = malloc(cap_line * sizeof *got);
    FILE *f = fopen(cases_path, "r");
    if (!f || !line || !text || !back || !want || !got) {
        fail("cannot read", cases_path);
        n_cases = 0;
    }
    while (f && line && text && back && want && got && fgets(line, (int)cap_line, f)) {
        char *tab = strchr(line, '\t');
        if (!tab)
            continue;
        size_t n = 0;
        for (char *p = line; p + 1 < tab; p += 2)
            text[n++] = (char)(hexval(p[0]) << 4 | hexval(p[1]));
        size_t n_want = 0;
        for (char *p = tab + 1, *q; (strtol(p, &q, 10), q != p); p = q)
            want[n_want++] = (int32_t)strtol(p, NULL, 10);
        size_t n_got = 0, n_back = 0;
        fg_err e = fg_tokenizer_encode(t, text, n, false, true, got, cap_line, &n_got);
        bool ids_same = e == FG_OK && n_got == n_want && !memcmp(got, want, n_got * sizeof *got);
        e = fg_tokenizer_decode(t, want, n_want, true, back, cap_line, &n_back);
        bool text_same = e == FG_OK && n_back == n && !memcmp(back, text, n);
        n_cases++;
        if (ids_same && text_same) {
            n_ok++;
        } else if (shown++ < 30) {
            printf("MISMATCH %zu%s: ", n_cases, text_same ? "" : " (decode differs)");
            show(text, n);
            putchar('\n');
            show_ids("hf       ", want, n_want);
            show_ids("flashgate", got, n_got);
        }
    }
    if (f)
        fclose(f);
    printf("matched %zu of %zu strings\n", n_ok, n_cases);
    free(line);
    free(text);
    free(back);
    free(want);
    free(got);
    fg_tokenizer_destroy(t);
    fg_gguf_close(g);
    return n_cases > 0 && n_ok == n_cases ? 0 : 1;
}

static int roundtrip(const char *vocab, long count, unsigned long seed)
{
    fg_gguf_t *g;
    fg_tokenizer_t *t;
    if (open_tok(vocab, &g, &t))
        return 2;
    static const char *const frag[] = {"<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                       "<\xef\xbd\x9c" "User\xef\xbd\x9c>", "<|EOT|>", " ", "\r\n", "123",
                                       "\xe4\xb8\xad", "\xf0\x9f\x98\x80"};
    uint64_t x = seed ? seed : 1;
    char buf[1024], back[1024];
    int32_t ids[1100];
    long bad = 0;
    for (long r = 0; r < count; r++) {
        size_t len = 0, want;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        want = (size_t)(x % 400);
        while (len < want) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            if (x % 5) {
                buf[len++] = (char)(x >> 24);
            } else {
                const char *fr = frag[(x >> 32) % (sizeof frag / sizeof frag[0])];
                size_t n = strlen(fr);
                if (len + n > sizeof buf)
                    break;
                memcpy(buf + len, fr, n);
                len += n;
            }
        }
        for (int special = 0; special < 2; special++) {
            size_t n = 0, m = 0;
            bool ok = fg_tokenizer_encode(t, buf, len, false, special, ids, sizeof ids / sizeof ids[0], &n) == FG_OK &&
                      fg_tokenizer_decode(t, ids, n, true, back, sizeof back, &m) == FG_OK && m == len &&
                      !memcmp(back, buf, len);
            if (!ok && bad++ < 10) {
                printf("ROUND TRIP FAILED (parse_special %d): ", special);
                show(buf, len);
                putchar('\n');
            }
        }
    }
    printf("round trips: %ld of %ld byte strings failed\n", bad, 2 * count);
    fg_tokenizer_destroy(t);
    fg_gguf_close(g);
    return bad ? 1 : 0;
}

typedef struct ends {
    size_t n;
    size_t at[4096];
} ends;

static int add_end(void *ctx, size_t start, size_t end)
{
    ends *e = ctx;
    (void)start;
    if (e->n < sizeof e->at / sizeof e->at[0])
        e->at[e->n] = end;
    e->n++;
    return 0;
}

static int pieces(const char *cases_path)
{
    FILE *f = fopen(cases_path, "r");
    if (!f)
        return fail("cannot open", cases_path);
    static char line[1 << 16], text[1 << 15];
    static ends want, got;
    size_t n_cases = 0, n_ok = 0;
    while (fgets(line, sizeof line, f)) {
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        if (!t2)
            continue;
        fg_pretok_kind kind;
        if (!fg_pretok_kind_from_name(line, (size_t)(t1 - line), &kind)) {
            fclose(f);
            return fail("unknown pre-tokenizer in", cases_path);
        }
        size_t n = 0;
        for (char *p = t1 + 1; p + 1 < t2 && n < sizeof text; p += 2)
            text[n++] = (char)(hexval(p[0]) << 4 | hexval(p[1]));
        want.n = 0;
        for (char *p = t2 + 1, *q; (strtoul(p, &q, 10), q != p) && want.n < 4096; p = q)
            want.at[want.n++] = strtoul(p, NULL, 10);
        got.n = 0;
        fg_pretok_split(kind, text, n, add_end, &got);
        bool same = got.n == want.n && !memcmp(got.at, want.at, got.n * sizeof got.at[0]);
        n_cases++;
        if (same) {
            n_ok++;
        } else if (n_cases - n_ok <= 30) {
            printf("MISMATCH %.*s: ", (int)(t1 - line), line);
            show(text, n);
            printf("\n    regex    :");
            for (size_t i = 0; i < want.n && i < 40; i++)
                printf(" %zu", want.at[i]);
            printf("\n    flashgate:");
            for (size_t i = 0; i < got.n && i < 40; i++)
                printf(" %zu", got.at[i]);
            putchar('\n');
        }
    }
    fclose(f);
    printf("pieces agree on %zu of %zu splits\n", n_ok, n_cases);
    return n_cases > 0 && n_ok == n_cases ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "pieces"))
        return pieces(argv[2]);
    if (argc == 7 && !strcmp(argv[1], "convert"))
        return convert(argv[2], argv[3], strtol(argv[4], NULL, 10), argv[5], argv[6]);
    if (argc == 4 && !strcmp(argv[1], "check"))
        return check(argv[2], argv[3]);
    if (argc == 5 && !strcmp(argv[1], "roundtrip"))
        return roundtrip(argv[2], strtol(argv[3], NULL, 10), strtoul(argv[4], NULL, 10));
    fprintf(stderr, "usage: hf_tokcheck convert TOKENIZER_JSON CONFIG_JSON VOCAB_SIZE PRE OUT.gguf\n"
                    "       hf_tokcheck check VOCAB.gguf CASES\n"
                    "       hf_tokcheck roundtrip VOCAB.gguf COUNT SEED\n"
                    "       hf_tokcheck pieces CASES\n");
    return 2;
}

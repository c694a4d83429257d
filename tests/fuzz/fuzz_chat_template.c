/* fuzz_chat_template.c: libFuzzer target for gateway/chat_template.h and
 * fg_tokenizer_encode_spans.
 *
 * The input is (1) a template text for fg_chat_family_detect, (2) a
 * conversation: messages cut at 0x00 bytes, each message's first byte picking
 * its role, whether its content is absent, how many tool calls it has (name
 * and arguments cut from its text at 0x01) and whether its text is reasoning
 * too, rendered as DeepSeek-V3 or DeepSeek-V4 (chat or thinking mode) by the
 * input's length; and (3) span bounds made
 * from its bytes (valid or not) for fg_tokenizer_encode_spans. Checks the
 * contracts: render either succeeds or fails with a diagnostic and an empty
 * prompt; a rendered prompt's spans are sorted, disjoint and inside it; its
 * tokens decode back to it exactly; encode_spans with bad spans fails, with
 * good ones its ids decode back to the text. A broken contract aborts.
 *
 * The vocabulary is built once: the 256 byte tokens, DeepSeek's chat and tool
 * markers as control tokens, "<think>" as a user-defined one, no merges.
 * The seed corpus is tests/fuzz/corpus/fuzz_chat_template/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "engine/tokenizer/byte_unicode.h"
#include "gateway/chat_template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define B "\xef\xbd\x9c"
#define S "\xe2\x96\x81"
static const char *const markers[] = {
    "<" B "begin" S "of" S "sentence" B ">", "<" B "end" S "of" S "sentence" B ">", "<" B "User" B ">",
    "<" B "Assistant" B ">", "<" B "tool" S "calls" S "begin" B ">", "<" B "tool" S "calls" S "end" B ">",
    "<" B "tool" S "call" S "begin" B ">", "<" B "tool" S "call" S "end" B ">", "<" B "tool" S "sep" B ">",
    "<" B "tool" S "outputs" S "begin" B ">", "<" B "tool" S "outputs" S "end" B ">",
    "<" B "tool" S "output" S "begin" B ">", "<" B "tool" S "output" S "end" B ">", "<think>"};
enum { N_MARKERS = sizeof markers / sizeof markers[0], N_VOCAB = 256 + N_MARKERS };

static fg_tokenizer_t *vocab(void)
{
    static char text[256][5];
    const char *tokens[N_VOCAB];
    int32_t types[N_VOCAB];
    for (int b = 0; b < 256; b++) {
        text[b][fg_byte_to_utf8((uint8_t)b, text[b])] = '\0';
        tokens[b] = text[b];
        types[b] = 1;
    }
    for (int i = 0; i < N_MARKERS; i++) {
        tokens[256 + i] = markers[i];
        types[256 + i] = i == N_MARKERS - 1 ? 4 : 3;
    }
    char path[] = "/tmp/fuzz_chat_vocab_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        abort();
    close(fd);
    fg_diag d = {{0}};
    fg_gguf_writer_t *w;
    fg_gguf_t *g;
    fg_tokenizer_t *t;
    if (fg_gguf_writer_create(path, 0, &w, &d) || fg_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2") ||
        fg_gguf_writer_add_str(w, "tokenizer.ggml.pre", "deepseek-v3") ||
        fg_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tokens, NULL, N_VOCAB) ||
        fg_gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", types, N_VOCAB) ||
        fg_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", NULL, NULL, 0) ||
        fg_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 256) ||
        fg_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 257) || fg_gguf_writer_begin_data(w, &d) ||
        fg_gguf_writer_finish(w, &d) || (fg_gguf_writer_destroy(w), 0) || fg_gguf_open_file(path, &g, &d) ||
        fg_tokenizer_create(g, &t, &d)) {
        fprintf(stderr, "fuzz_chat_template: vocabulary: %s\n", d.msg);
        abort();
    }
    fg_gguf_close(g); /* the tokenizer keeps its own copies */
    unlink(path);
    return t;
}

/* Decodes ids with control text kept and requires exactly want. */
static void same_back(const fg_tokenizer_t *t, const int32_t *ids, size_t n, const char *want, size_t len)
{
    char *back = malloc(len + 1);
    size_t got = 0;
    if (!back || fg_tokenizer_decode(t, ids, n, true, back, len + 1, &got) != FG_OK || got != len ||
        memcmp(back, want, len) != 0)
        abort();
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fg_tokenizer_t *t;
    if (!t)
        t = vocab();
    const char *s = (const char *)data;
    fg_diag d = {{0}};

    fg_chat_family f;
    fg_err e = fg_chat_family_detect(s, size, t, &f, &d);
    if (e != FG_OK && e != FG_ERR_UNSUPPORTED)
        abort();
    if (fg_chat_family_detect(NULL, 0, t, &f, &d) != FG_OK || f != FG_CHAT_DEEPSEEK_V3)
        abort();

    /* A conversation of up to 16 messages, 4 calls each. */
    fg_chat_msg msgs[16];
    fg_chat_call calls[16][4];
    uint32_t n = 0;
    for (size_t at = 0; at < size && n < 16;) {
        const char *end = memchr(s + at, 0, size - at);
        size_t len = end ? (size_t)(end - (s + at)) : size - at;
        uint8_t c = len ? data[at] : 0;
        fg_chat_msg *m = &msgs[n];
        m->role = (fg_chat_role)(c & 7);
        const char *body = s + at + (len ? 1 : 0);
        size_t body_len = len ? len - 1 : 0;
        m->content = (c & 8) ? (fg_chat_text){NULL, 0} : (fg_chat_text){body, body_len};
        m->reasoning = (c & 64) ? (fg_chat_text){body, body_len} : (fg_chat_text){NULL, 0};
        m->n_calls = (c >> 4) & 3;
        m->calls = calls[n];
        for (uint32_t k = 0; k < m->n_calls; k++) {
            const char *sep = memchr(body, 1, body_len);
            size_t nl = sep ? (size_t)(sep - body) : body_len;
            calls[n][k] = (fg_chat_call){{body, nl}, {sep ? sep + 1 : body, sep ? body_len - nl - 1 : 0}};
        }
        n++;
        at += len + 1;
    }
    static fg_chat_prompt p; /* reused across inputs, as a session would */
    fg_chat_conv conv = {.msgs = msgs, .n_msgs = n, .add_generation_prompt = size & 1, .thinking = (size & 4) != 0};
    e = fg_chat_render((size & 2) ? FG_CHAT_DEEPSEEK_V4 : FG_CHAT_DEEPSEEK_V3, &conv, t, &p, &d);
    if (e != FG_OK) {
        if (p.len || p.n_spans || !d.msg[0])
            abort();
    } else {
        for (size_t k = 0; k < p.n_spans; k++)
            if (p.spans[k].start >= p.spans[k].end || p.spans[k].end > p.len ||
                (k && p.spans[k].start <= p.spans[k - 1].end))
                abort();
        fg_tokens ids = {0};
        if (fg_chat_encode(t, &p, &ids) != FG_OK)
            abort();
        same_back(t, ids.v, ids.n, p.text, p.len);
        fg_tokens_free(&ids);
    }

    /* Spans straight from the input's first bytes, over the whole input. */
    fg_tok_span spans[4];
    size_t n_spans = size ? data[0] % 5 : 0;
    bool valid = true;
    for (size_t k = 0; k < n_spans; k++) {
        size_t a = 1 + 2 * k < size ? data[1 + 2 * k] : 0, b = 2 + 2 * k < size ? data[2 + 2 * k] : 0;
        spans[k] = (fg_tok_span){a, a + b};
        valid = valid && a + b <= size && (k == 0 || a >= spans[k - 1].end);
    }
    int32_t *out = malloc((size + 1) * sizeof *out);
    size_t got = 0;
    if (!out)
        abort();
    e = fg_tokenizer_encode_spans(t, s, size, spans, n_spans, out, size + 1, &got);
    if (valid != (e == FG_OK))
        abort();
    if (e == FG_OK)
        same_back(t, out, got, s, size);
    free(out);
    return 0;
}

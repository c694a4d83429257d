/* flashgate-generate: generate text from a model and a prompt on the CPU.
 *
 * Prints the continuation as it is produced, then prefill and decode rates on
 * stderr. With --logits-out it writes the logits of every prompt position and
 * every generated step (format below) so runs can be compared with another
 * implementation (tests/reference/deepseek2_ref.py compare).
 *
 * Logits file (little-endian): "FGLG", u32 version 1, u32 n_positions,
 * u32 n_vocab, then per position i: i32 token at i, f32 logits[n_vocab]
 * computed after consuming that token (they predict position i + 1).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/base/clock.h"
#include "engine/engine.h"
#include "engine/serve/sampler.h"
#include "engine/serve/stop.h"

#define MAX_STOPS 8

typedef struct options {
    fg_engine_options eng;
    const char *prompt;
    const char *prompt_file;
    const char *token_list;
    const char *logits_out;
    int n_predict;
    fg_sampling sampling;
    const char *stops[MAX_STOPS];
    int n_stops;
    int no_bos;
    int ignore_eos;
    int print_ids;
} options;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: flashgate-generate [options]\n"
            "  -m, --model PATH        GGUF model (default models/flash-english.gguf)\n"
            "  -p, --prompt TEXT       prompt text\n"
            "  -f, --prompt-file PATH  read the prompt from a file\n"
            "      --tokens LIST       prompt as comma-separated token ids (no BOS added)\n"
            "  -n, --n-predict N       tokens to generate (default 64)\n"
            "      --temp T            temperature (default 0 = greedy)\n"
            "      --top-k K           (default 0 = off)\n"
            "      --top-p P           (default 1 = off)\n"
            "      --min-p P           (default 0 = off)\n"
            "      --seed N            sampling seed (default 0)\n"
            "      --stop STR          stop when the text contains STR (repeatable, up to %d)\n"
            "      --ignore-eos        keep generating after EOS\n"
            "      --no-bos            do not prepend BOS to a text prompt\n"
            "      --kv-format F       f32, f16, int8, fp8, fp4 (default: deepseek2 fp4 when the model allows,\n"
            "                          deepseek4 fp8: FP8 + BF16 rows, FP4 index keys)\n"
            "      --threads N         worker threads (default: all CPUs)\n"
            "      --batch N           max tokens per forward pass (default 256)\n"
            "      --ctx N             max context per session (default: the model's)\n"
            "      --isa NAME          scalar, avx2, avx512 (default: best available)\n"
            "      --logits-out PATH   write every position's logits (FGLG format)\n"
            "      --print-ids         print generated token ids instead of text\n"
            "  -h, --help\n",
            MAX_STOPS);
}

static int parse_int(const char *s, const char *flag, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "error: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *s, const char *flag, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end) {
        fprintf(stderr, "error: %s expects a number, got '%s'\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    enum { O_TOKENS = 256, O_TEMP, O_TOPK, O_TOPP, O_MINP, O_SEED, O_STOP, O_IGNORE_EOS, O_NO_BOS, O_KV, O_THREADS,
           O_BATCH, O_CTX, O_ISA, O_LOGITS, O_IDS };
    static const struct option longs[] = {
        {"model", required_argument, 0, 'm'}, {"prompt", required_argument, 0, 'p'},
        {"prompt-file", required_argument, 0, 'f'}, {"tokens", required_argument, 0, O_TOKENS},
        {"n-predict", required_argument, 0, 'n'}, {"temp", required_argument, 0, O_TEMP},
        {"top-k", required_argument, 0, O_TOPK}, {"top-p", required_argument, 0, O_TOPP},
        {"min-p", required_argument, 0, O_MINP}, {"seed", required_argument, 0, O_SEED},
        {"stop", required_argument, 0, O_STOP}, {"ignore-eos", no_argument, 0, O_IGNORE_EOS},
        {"no-bos", no_argument, 0, O_NO_BOS}, {"kv-format", required_argument, 0, O_KV},
        {"threads", required_argument, 0, O_THREADS}, {"batch", required_argument, 0, O_BATCH},
        {"ctx", required_argument, 0, O_CTX}, {"isa", required_argument, 0, O_ISA},
        {"logits-out", required_argument, 0, O_LOGITS}, {"print-ids", no_argument, 0, O_IDS},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    fg_engine_options_default(&o->eng);
    o->eng.model_path = "models/flash-english.gguf";
    o->n_predict = 64;
    o->sampling = fg_sampling_default();
    int c;
    long v;
    while ((c = getopt_long(argc, argv, "m:p:f:n:h", longs, NULL)) != -1) {
        switch (c) {
        case 'm': o->eng.model_path = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'f': o->prompt_file = optarg; break;
        case O_TOKENS: o->token_list = optarg; break;
        case 'n':
            if (parse_int(optarg, "--n-predict", 0, 1 << 24, &v)) return -1;
            o->n_predict = (int)v;
            break;
        case O_TEMP: if (parse_float(optarg, "--temp", &o->sampling.temperature)) return -1; break;
        case O_TOPK:
            if (parse_int(optarg, "--top-k", 0, 1 << 24, &v)) return -1;
            o->sampling.top_k = (int)v;
            break;
        case O_TOPP: if (parse_float(optarg, "--top-p", &o->sampling.top_p)) return -1; break;
        case O_MINP: if (parse_float(optarg, "--min-p", &o->sampling.min_p)) return -1; break;
        case O_SEED:
            if (parse_int(optarg, "--seed", 0, (long)(~0ul >> 1), &v)) return -1;
            o->sampling.seed = (uint64_t)v;
            break;
        case O_STOP:
            if (o->n_stops == MAX_STOPS) {
                fprintf(stderr, "error: at most %d --stop strings\n", MAX_STOPS);
                return -1;
            }
            o->stops[o->n_stops++] = optarg;
            break;
        case O_IGNORE_EOS: o->ignore_eos = 1; break;
        case O_NO_BOS: o->no_bos = 1; break;
        case O_KV:
            o->eng.kv_format = fg_kv_format_parse(optarg);
            if (o->eng.kv_format < 0) {
                fprintf(stderr, "error: --kv-format must be f32, f16, int8, fp8 or fp4, got '%s'\n", optarg);
                return -1;
            }
            break;
        case O_THREADS:
            if (parse_int(optarg, "--threads", 1, 1024, &v)) return -1;
            o->eng.n_threads = (int)v;
            break;
        case O_BATCH:
            if (parse_int(optarg, "--batch", 1, 65536, &v)) return -1;
            o->eng.max_batch_tokens = (int)v;
            break;
        case O_CTX:
            if (parse_int(optarg, "--ctx", 1, 1 << 24, &v)) return -1;
            o->eng.max_context = (int)v;
            break;
        case O_ISA:
            if (!strcmp(optarg, "scalar")) o->eng.isa = FG_ISA_SCALAR;
            else if (!strcmp(optarg, "avx2")) o->eng.isa = FG_ISA_AVX2;
            else if (!strcmp(optarg, "avx512")) o->eng.isa = FG_ISA_AVX512;
            else {
                fprintf(stderr, "error: --isa must be scalar, avx2 or avx512\n");
                return -1;
            }
            break;
        case O_LOGITS: o->logits_out = optarg; break;
        case O_IDS: o->print_ids = 1; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "error: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!!o->prompt + !!o->prompt_file + !!o->token_list > 1) {
        fprintf(stderr, "error: give only one of --prompt, --prompt-file, --tokens\n");
        return -1;
    }
    return 0;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

/* Tokens of the prompt, malloc'd; NULL on error (already reported). */
static int32_t *prompt_tokens(const options *o, const fg_tokenizer_t *tok, int n_vocab, int *n_out)
{
    if (o->token_list) {
        size_t cap = strlen(o->token_list) / 2 + 2;
        int32_t *ids = malloc(cap * sizeof *ids);
        int n = 0;
        const char *s = o->token_list;
        while (ids && *s) {
            char *end;
            errno = 0;
            long v = strtol(s, &end, 10);
            if (errno || end == s || v < 0 || v >= n_vocab) {
                fprintf(stderr, "error: --tokens: bad token id near '%.16s' (vocabulary has %d)\n", s, n_vocab);
                free(ids);
                return NULL;
            }
            ids[n++] = (int32_t)v;
            s = *end == ',' ? end + 1 : end;
            if (*end && *end != ',') {
                fprintf(stderr, "error: --tokens: expected ',' near '%.16s'\n", end);
                free(ids);
                return NULL;
            }
        }
        *n_out = n;
        return ids;
    }
    size_t len = 0;
    char *text = NULL;
    if (o->prompt_file) {
        text = read_file(o->prompt_file, &len);
        if (!text) {
            fprintf(stderr, "error: cannot read prompt file %s: %s\n", o->prompt_file, strerror(errno));
            return NULL;
        }
    }
    const char *src = text ? text : (o->prompt ? o->prompt : "");
    if (!text)
        len = strlen(src);
    size_t cap = len + 2, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    fg_err e = ids ? fg_tokenizer_encode(tok, src, len, !o->no_bos, false, ids, cap, &n) : FG_ERR_NOMEM;
    free(text);
    if (e != FG_OK) {
        fprintf(stderr, "error: cannot tokenize the prompt: %s\n", fg_err_describe(e));
        free(ids);
        return NULL;
    }
    *n_out = (int)n;
    return ids;
}

static int write_logits_record(FILE *f, int32_t token, const float *logits, int n_vocab)
{
    return fwrite(&token, 4, 1, f) == 1 && fwrite(logits, 4, (size_t)n_vocab, f) == (size_t)n_vocab ? 0 : -1;
}

int main(int argc, char **argv)
{
    options o = {0};
    if (parse_args(argc, argv, &o))
        return 2;
    fg_diag diag = {{0}};
    fg_err e = fg_sampling_validate(&o.sampling, &diag);
    if (e != FG_OK) {
        fprintf(stderr, "error: %s\n", diag.msg);
        return 2;
    }
    fg_engine_t *eng;
    if ((e = fg_engine_open(&o.eng, &eng, &diag)) != FG_OK) {
        fprintf(stderr, "error: cannot load %s: %s (%s)\n", o.eng.model_path, diag.msg, fg_err_name(e));
        return 1;
    }
    fg_engine_info info;
    fg_engine_get_info(eng, &info);
    const fg_tokenizer_t *tok = fg_engine_tokenizer(eng);
    const int V = info.n_vocab;

    int rc = 1, n_prompt = 0, n_gen = 0;
    int32_t *prompt = NULL;
    float *logits = NULL;
    char *text = NULL;
    size_t text_len = 0, text_cap = 0;
    FILE *lf = NULL;
    fg_session_t *sess = NULL;
    fg_sampler_t *smp = NULL;

    prompt = prompt_tokens(&o, tok, V, &n_prompt);
    if (!prompt)
        goto out;
    if (n_prompt == 0) {
        fprintf(stderr, "error: the prompt is empty (give --prompt, or keep BOS)\n");
        goto out;
    }
    if (n_prompt + o.n_predict > info.n_ctx) {
        fprintf(stderr, "error: prompt of %d tokens plus %d to generate exceeds the context of %d tokens\n", n_prompt,
                o.n_predict, info.n_ctx);
        goto out;
    }
    logits = malloc((size_t)n_prompt * V * sizeof *logits);
    if (!logits || fg_session_create(eng, NULL, &sess) != FG_OK ||
        fg_sampler_create(V, &smp, &diag) != FG_OK) {
        fprintf(stderr, "error: out of memory\n");
        goto out;
    }
    if (o.logits_out) {
        lf = fopen(o.logits_out, "wb");
        uint32_t hdr[3] = {1, 0, (uint32_t)V};
        if (!lf || fwrite("FGLG", 1, 4, lf) != 4 || fwrite(hdr, 4, 3, lf) != 3) {
            fprintf(stderr, "error: cannot write %s: %s\n", o.logits_out, strerror(errno));
            goto out;
        }
    }

    double t0 = fg_clock_mono_s();
    if ((e = fg_session_eval(sess, prompt, n_prompt, logits, lf != NULL, &diag)) != FG_OK) {
        fprintf(stderr, "error: prefill failed: %s (%s)\n", diag.msg, fg_err_name(e));
        goto out;
    }
    double t_prefill = fg_clock_mono_s() - t0;
    const float *last = lf ? logits + (size_t)(n_prompt - 1) * V : logits;
    for (int i = 0; lf && i < n_prompt; i++)
        if (write_logits_record(lf, prompt[i], logits + (size_t)i * V, V)) {
            fprintf(stderr, "error: writing logits: %s\n", strerror(errno));
            goto out;
        }

    double t1 = fg_clock_mono_s();
    uint64_t rng = fg_sampler_rng_init(o.sampling.seed);
    int stopped = 0;
    while (n_gen < o.n_predict && !stopped) {
        int32_t next = fg_sampler_sample(smp, &o.sampling, &rng, last);
        n_gen++;
        if (next == fg_tokenizer_eos(tok) && !o.ignore_eos)
            stopped = 1;
        const char *bytes = "";
        size_t nb = 0;
        fg_tokenizer_token_bytes(tok, next, false, &bytes, &nb);
        if (text_len + nb + 1 > text_cap) {
            text_cap = (text_len + nb + 1) * 2;
            char *t = realloc(text, text_cap);
            if (!t) {
                fprintf(stderr, "error: out of memory\n");
                goto out;
            }
            text = t;
        }
        size_t from = text_len;
        memcpy(text + text_len, bytes, nb);
        text_len += nb;
        long cut = fg_stop_find(text, text_len, from, o.stops, o.n_stops);
        if (cut >= 0) {
            nb = (size_t)cut > from ? (size_t)cut - from : 0;
            text_len = (size_t)cut;
            stopped = 1;
        }
        if (o.print_ids)
            printf("%s%d", n_gen > 1 ? " " : "", next);
        else
            fwrite(bytes, 1, nb, stdout);
        fflush(stdout);
        /* The last token is evaluated only when its logits are wanted. */
        if ((n_gen < o.n_predict && !stopped) || lf) {
            if ((e = fg_session_eval_sampled(sess, next, logits, &diag)) != FG_OK) {
                fprintf(stderr, "\nerror: decode failed: %s (%s)\n", diag.msg, fg_err_name(e));
                goto out;
            }
            last = logits;
            if (lf && write_logits_record(lf, next, logits, V)) {
                fprintf(stderr, "error: writing logits: %s\n", strerror(errno));
                goto out;
            }
        }
    }
    double t_decode = fg_clock_mono_s() - t1;
    printf("\n");
    fprintf(stderr, "prompt: %d tokens in %.3f s (%.1f tokens/s); generated: %d tokens in %.3f s (%.1f tokens/s); "
                    "kv %s %zu B/token + %zu B per session; %d threads, %s\n",
            n_prompt, t_prefill, n_prompt / (t_prefill > 0 ? t_prefill : 1e-9), n_gen, t_decode,
            n_gen / (t_decode > 0 ? t_decode : 1e-9), fg_kv_format_name(info.kv_format), info.kv_bytes_per_token,
            info.kv_seq_bytes, info.n_threads, fg_isa_name(info.isa));
    if (lf) {
        uint32_t n_pos = (uint32_t)fg_session_length(sess);
        if (fseek(lf, 8, SEEK_SET) || fwrite(&n_pos, 4, 1, lf) != 1) {
            fprintf(stderr, "error: writing logits header: %s\n", strerror(errno));
            goto out;
        }
    }
    rc = 0;
out:
    if (lf && fclose(lf) && rc == 0) {
        fprintf(stderr, "error: closing %s: %s\n", o.logits_out, strerror(errno));
        rc = 1;
    }
    free(text);
    free(prompt);
    free(logits);
    fg_sampler_destroy(smp);
    fg_session_free(sess);
    fg_engine_close(eng);
    return rc;
}

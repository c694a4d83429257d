/* flashgate-modelgen: writes a deterministic deepseek2 GGUF, random weights or
 * trained ones (--weights, from engine/tools/train/).
 *
 * Starts from a preset (tiny, flash-mini, english), applies the flags, prints the
 * parameter counts and writes the file (engine/model/modelgen.h does the work).
 * Exit status: 0 on success, 1 when writing fails, 2 on a bad command line.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "config/base/clock.h"
#include "engine/model/gguf.h"
#include "engine/model/modelgen.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: flashgate-modelgen --preset tiny|flash-mini|english --out PATH [options]\n"
            "\n"
            "options:\n"
            "  --type f32|f16|bf16|q8_0   type of the weight matrices (norms and router stay f32)\n"
            "  --gating softmax|sigmoid   expert gating (sigmoid adds exp_probs_b selection biases)\n"
            "  --groups G:K|none          group-limited routing: G groups, the best K eligible\n"
            "  --no-q-lora                plain attn_q instead of the q-LoRA pair (\"lite\" layout)\n"
            "  --tied                     tie the output head to token_embd (no output.weight)\n"
            "  --yarn FACTOR              YaRN rope scaling keys; context_length becomes FACTOR x the preset's\n"
            "  --seed N                   random seed (default 42); same flags + seed = same bytes\n"
            "  --layers N                 block count (leading dense blocks capped at N)\n"
            "  --bpe-corpus FILE          train the BPE vocabulary on FILE instead of the built-in text\n"
            "  --weights FILE             trained weights (FGW1, engine/model/modelgen.h) instead of random ones\n"
            "  --from GGUF                vocabulary and weights of an F32 model of this preset (convert --type)\n"
            "  --help                     this text\n");
}

static int bad(const char *fmt, const char *arg)
{
    fprintf(stderr, "flashgate-modelgen: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(run with --help for usage)\n");
    return 2;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+')
        return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end || v > max)
        return -1;
    *out = v;
    return 0;
}

/* The whole file, NUL-terminated; NULL on any error. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = (n + 65536 + 1) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, 65536, f);
        n += got;
        if (got < 65536)
            break;
    }
    int bad_read = ferror(f);
    fclose(f);
    if (bad_read) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static const char *type_name(uint32_t t)
{
    switch (t) {
    case FG_GGML_F32: return "f32";
    case FG_GGML_F16: return "f16";
    case FG_GGML_BF16: return "bf16";
    case FG_GGML_Q8_0: return "q8_0";
    default: return "?";
    }
}

int main(int argc, char **argv)
{
    const char *preset = NULL, *out = NULL, *type = NULL, *gating = NULL, *groups = NULL, *yarn = NULL,
               *seed = NULL, *layers = NULL, *bpe_corpus = NULL, *weights = NULL,
               *from = NULL;
    int no_q_lora = 0, tied = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--no-q-lora") == 0) {
            no_q_lora = 1;
            continue;
        }
        if (strcmp(a, "--tied") == 0) {
            tied = 1;
            continue;
        }
        static const char *const names[] = {"--preset", "--out",    "--type",       "--gating",  "--groups", "--yarn",
                                            "--seed",   "--layers", "--bpe-corpus", "--weights", "--from"};
        const char **slots[] = {&preset, &out,    &type,       &gating,  &groups, &yarn,
                                &seed,   &layers, &bpe_corpus, &weights, &from};
        int found = 0;
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
            size_t n = strlen(names[k]);
            if (strncmp(a, names[k], n) != 0 || (a[n] != '\0' && a[n] != '='))
                continue;
            found = 1;
            if (a[n] == '=') {
                *slots[k] = a + n + 1;
            } else if (i + 1 < argc) {
                *slots[k] = argv[++i];
            } else {
                return bad("%s needs a value", names[k]);
            }
        }
        if (!found)
            return bad("unknown argument '%s'", a);
    }
    if (!preset)
        return bad("%s", "--preset is required (tiny, flash-mini or english)");
    if (!out || !*out)
        return bad("%s", "--out PATH is required");

    fg_modelgen_spec spec;
    if (fg_modelgen_preset(preset, &spec) != FG_OK)
        return bad("unknown preset '%s' (tiny, flash-mini, english)", preset);

    if (type) {
        if (strcmp(type, "f32") == 0)
            spec.weight_type = FG_GGML_F32;
        else if (strcmp(type, "f16") == 0)
            spec.weight_type = FG_GGML_F16;
        else if (strcmp(type, "bf16") == 0)
            spec.weight_type = FG_GGML_BF16;
        else if (strcmp(type, "q8_0") == 0)
            spec.weight_type = FG_GGML_Q8_0;
        else
            return bad("unknown --type '%s' (f32, f16, bf16, q8_0)", type);
    }
    if (gating) {
        if (strcmp(gating, "softmax") == 0)
            spec.gating = FG_MODELGEN_GATING_SOFTMAX;
        else if (strcmp(gating, "sigmoid") == 0)
            spec.gating = FG_MODELGEN_GATING_SIGMOID;
        else
            return bad("unknown --gating '%s' (softmax, sigmoid)", gating);
    }
    if (groups) {
        if (strcmp(groups, "none") == 0) {
            spec.n_expert_groups = spec.n_expert_groups_used = 0;
        } else {
            const char *colon = strchr(groups, ':');
            char g[32];
            uint64_t gv, kv;
            if (!colon || (size_t)(colon - groups) >= sizeof g)
                return bad("--groups wants G:K (e.g. 8:4) or none, not '%s'", groups);
            memcpy(g, groups, (size_t)(colon - groups));
            g[colon - groups] = '\0';
            if (parse_u64(g, 4096, &gv) || parse_u64(colon + 1, 4096, &kv) || gv == 0 || kv == 0)
                return bad("--groups wants positive G:K (e.g. 8:4), not '%s'", groups);
            spec.n_expert_groups = (uint32_t)gv;
            spec.n_expert_groups_used = (uint32_t)kv;
        }
    }
    if (no_q_lora)
        spec.q_lora_rank = 0;
    if (tied)
        spec.tied_embeddings = true;
    if (yarn) {
        char *end = NULL;
        errno = 0;
        double f = strtod(yarn, &end);
        if (errno || *end || !(f >= 1.0 && f <= 1024.0))
            return bad("--yarn wants a factor in [1, 1024], not '%s'", yarn);
        double ctx = floor((double)spec.n_ctx * f);
        if (ctx > (double)(1u << 30))
            return bad("--yarn %s makes the context too long", yarn);
        spec.yarn_factor = (float)f;
        spec.yarn_orig_ctx = spec.n_ctx;
        spec.n_ctx = (uint32_t)ctx;
    }
    if (seed) {
        uint64_t v;
        if (parse_u64(seed, UINT64_MAX, &v))
            return bad("--seed wants a non-negative integer, not '%s'", seed);
        spec.seed = v;
    }
    if (layers) {
        uint64_t v;
        if (parse_u64(layers, 1024, &v) || v == 0)
            return bad("--layers wants an integer in 1..1024, not '%s'", layers);
        spec.n_layer = (uint32_t)v;
        if (spec.n_layer_dense_lead > spec.n_layer)
            spec.n_layer_dense_lead = spec.n_layer;
    }

    char *text = NULL;
    if (bpe_corpus) {
        size_t len = 0;
        if (!(text = read_file(bpe_corpus, &len))) {
            fprintf(stderr, "flashgate-modelgen: cannot read --bpe-corpus %s\n", bpe_corpus);
            return 1;
        }
        spec.bpe_text = text;
        spec.bpe_text_len = len;
    }
    if (weights)
        spec.weights_path = weights;
    if (from)
        spec.source_path = from;
    if (from && (weights || bpe_corpus)) {
        free(text);
        return bad("%s", "--from takes the vocabulary and weights: no --weights or --bpe-corpus with it");
    }

    fg_diag diag = {{0}};
    if (fg_modelgen_validate(&spec, &diag) != FG_OK) {
        fprintf(stderr, "flashgate-modelgen: %s\n", diag.msg);
        free(text);
        return 2;
    }

    uint64_t total = 0, active = 0;
    fg_modelgen_param_counts(&spec, &total, &active);
    printf("preset %s: %u layers (%u dense), d=%u, %u heads, %u experts top-%u, vocab %u, weights %s, seed %" PRIu64
           "\n",
           preset, spec.n_layer, spec.n_layer_dense_lead, spec.n_embd, spec.n_head, spec.n_expert,
           spec.n_expert_used, spec.n_vocab, type_name(spec.weight_type),
           spec.seed);
    printf("parameters: total %" PRIu64 " (%.1fM), active per token %" PRIu64 " (%.1fM)\n", total, total / 1e6,
           active, active / 1e6);
    fflush(stdout);

    double t0 = fg_clock_mono_s();
    fg_err e = fg_modelgen_write(&spec, out, &diag);
    double dt = fg_clock_mono_s() - t0;
    free(text);
    if (e != FG_OK) {
        fprintf(stderr, "flashgate-modelgen: %s (%s)\n", diag.msg, fg_err_name(e));
        return 1;
    }
    struct stat st;
    long long size = stat(out, &st) == 0 ? (long long)st.st_size : -1;
    printf("wrote %s: %lld bytes (%.1f MB) in %.2f s\n", out, size, size / 1e6, dt);
    return 0;
}

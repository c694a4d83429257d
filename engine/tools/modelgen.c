/* flashgate-modelgen: writes a deterministic deepseek2 or deepseek4 GGUF,
 * random weights or, for deepseek2, trained ones (--weights, from
 * engine/tools/train/).
 *
 * Starts from a preset (tiny, flash-mini, english: deepseek2; v4-tiny,
 * v4-mini: deepseek4), applies the flags, prints the
 * parameter counts and writes the file (engine/model/modelgen.h does the work).
 * Exit status: 0 on success, 1 when writing fails, 2 on a bad command line.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "config/base/clock.h"
#include "config/base/file.h"
#include "engine/model/gguf.h"
#include "engine/model/modelgen.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: flashgate-modelgen --preset tiny|flash-mini|english|v4-tiny|v4-mini --out PATH [options]\n"
            "\n"
            "options:\n"
            "  --type f32|f16|bf16|q8_0   type of the weight matrices (norms and router stay f32;\n"
            "                             v4 presets: every matrix, embeddings, router and experts too)\n"
            "  --seed N                   random seed (default 42); same flags + seed = same bytes\n"
            "  --chat-markers             add DeepSeek-V3's chat and tool markers as control tokens\n"
            "  --v4-chat-markers          add DeepSeek-V4's chat markers (User, Assistant, latest_reminder,\n"
            "                             <think>, </think>, DSML) as control tokens\n"
            "                             (in n_vocab: fewer BPE merges; without it the file is unchanged)\n"
            "  --embd N                   embedding width instead of the preset's\n"
            "  --help                     this text\n"
            "\n"
            "deepseek4 (v4-*) only:\n"
            "  --embd-type f32|f16|bf16|q8_0        token_embd, output, router, indexer.proj (after --type)\n"
            "  --expert-type f32|f16|bf16|q8_0|mxfp4 routed experts (after --type)\n"
            "  --hash-layers N            the first N layers route by ffn_gate_tid2eid (0: none)\n"
            "\n"
            "deepseek2 (tiny, flash-mini) only:\n"
            "  --gating softmax|sigmoid   expert gating (sigmoid adds exp_probs_b selection biases)\n"
            "  --groups G:K|none          group-limited routing: G groups, the best K eligible\n"
            "  --no-q-lora                plain attn_q instead of the q-LoRA pair (\"lite\" layout)\n"
            "  --tied                     tie the output head to token_embd (no output.weight)\n"
            "  --yarn FACTOR              YaRN rope scaling keys; context_length becomes FACTOR x the preset's\n"
            "  --layers N                 block count (leading dense blocks capped at N)\n"
            "  --nextn 0|1                DeepSeek-V3's MTP block after the trunk's layers (nextn_predict_layers;\n"
            "                             with --from: the source's)\n"
            "  --bpe-corpus FILE          train the BPE vocabulary on FILE instead of the built-in text\n"
            "  --weights FILE             trained weights (FGW1, engine/model/modelgen.h) instead of random ones\n"
            "  --from GGUF                vocabulary and weights of an F32 model of this preset (convert --type)\n");
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

static const struct {
    const char *name;
    uint32_t id;
} TYPES[] = {
    {"f32", FG_GGML_F32},   {"f16", FG_GGML_F16},     {"bf16", FG_GGML_BF16},
    {"q8_0", FG_GGML_Q8_0}, {"mxfp4", FG_GGML_MXFP4},
};

static const char *type_name(uint32_t t)
{
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (TYPES[i].id == t)
            return TYPES[i].name;
    return "?";
}

/* 0 and *out set for a known name (mxfp4 only where allowed), -1 otherwise. */
static int parse_type(const char *name, int allow_mxfp4, uint32_t *out)
{
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++) {
        if (strcmp(TYPES[i].name, name) == 0 && (allow_mxfp4 || TYPES[i].id != FG_GGML_MXFP4)) {
            *out = TYPES[i].id;
            return 0;
        }
    }
    return -1;
}

int main(int argc, char **argv)
{
    const char *preset = NULL, *out = NULL, *type = NULL, *gating = NULL, *groups = NULL, *yarn = NULL,
               *seed = NULL, *layers = NULL, *embd = NULL, *embd_type = NULL, *expert_type = NULL,
               *hash_layers = NULL, *bpe_corpus = NULL, *weights = NULL, *from = NULL, *nextn = NULL;
    int no_q_lora = 0, tied = 0, chat_markers = 0, v4_chat_markers = 0;

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
        if (strcmp(a, "--chat-markers") == 0) {
            chat_markers = 1;
            continue;
        }
        if (strcmp(a, "--v4-chat-markers") == 0) {
            v4_chat_markers = 1;
            continue;
        }
        static const char *const names[] = {"--preset",      "--out",         "--type",       "--gating",
                                            "--groups",      "--yarn",        "--seed",       "--layers",
                                            "--embd",        "--embd-type",   "--expert-type", "--hash-layers",
                                            "--bpe-corpus",  "--weights",     "--from",       "--nextn"};
        const char **slots[] = {&preset, &out,  &type,      &gating,      &groups,      &yarn,       &seed,    &layers,
                                &embd,   &embd_type, &expert_type, &hash_layers, &bpe_corpus, &weights, &from,
                                &nextn};
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
        return bad("%s", "--preset is required (tiny, flash-mini, english, v4-tiny or v4-mini)");
    if (!out || !*out)
        return bad("%s", "--out PATH is required");

    fg_modelgen_spec spec;
    if (fg_modelgen_preset(preset, &spec) != FG_OK)
        return bad("unknown preset '%s' (tiny, flash-mini, english, v4-tiny, v4-mini)", preset);
    const int v4 = spec.arch == FG_MODELGEN_DEEPSEEK4;
    /* an option the architecture has no use for is refused, not ignored */
    const struct {
        const char *flag;
        int given;
    } v2_only[] = {{"--gating", gating != NULL}, {"--groups", groups != NULL}, {"--yarn", yarn != NULL},
                   {"--layers", layers != NULL}, {"--no-q-lora", no_q_lora}, {"--tied", tied},
                   {"--bpe-corpus", bpe_corpus != NULL}, {"--weights", weights != NULL}, {"--from", from != NULL},
                   {"--nextn", nextn != NULL}},
      v4_only[] = {{"--embd-type", embd_type != NULL}, {"--expert-type", expert_type != NULL},
                   {"--hash-layers", hash_layers != NULL}};
    for (size_t k = 0; v4 && k < sizeof v2_only / sizeof v2_only[0]; k++)
        if (v2_only[k].given)
            return bad("%s is for the deepseek2 presets (tiny, flash-mini, english)", v2_only[k].flag);
    for (size_t k = 0; !v4 && k < sizeof v4_only / sizeof v4_only[0]; k++)
        if (v4_only[k].given)
            return bad("%s is for the deepseek4 presets (v4-tiny, v4-mini)", v4_only[k].flag);

    if (type) {
        uint32_t t;
        if (parse_type(type, 0, &t))
            return bad("unknown --type '%s' (f32, f16, bf16, q8_0)", type);
        spec.weight_type = t;
        if (v4)
            spec.v4.embd_type = spec.v4.expert_type = t;
    }
    if (embd_type && parse_type(embd_type, 0, &spec.v4.embd_type))
        return bad("unknown --embd-type '%s' (f32, f16, bf16, q8_0)", embd_type);
    if (expert_type && parse_type(expert_type, 1, &spec.v4.expert_type))
        return bad("unknown --expert-type '%s' (f32, f16, bf16, q8_0, mxfp4)", expert_type);
    if (hash_layers) {
        uint64_t v;
        if (parse_u64(hash_layers, spec.n_layer, &v))
            return bad("--hash-layers wants an integer from 0 to the preset's layer count, not '%s'", hash_layers);
        spec.v4.n_hash_layer = (uint32_t)v;
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
    spec.chat_markers = chat_markers != 0;
    spec.v4_chat_markers = v4_chat_markers != 0;
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

    if (nextn) {
        uint64_t v;
        if (parse_u64(nextn, 1, &v))
            return bad("--nextn wants 0 or 1, not '%s'", nextn);
        spec.n_nextn = (uint32_t)v;
    } else if (from) { /* a conversion keeps the source's MTP block unless --nextn says otherwise */
        fg_gguf_t *g;
        fg_diag gd = {{0}};
        uint32_t n = 0;
        if (fg_gguf_open_file(from, &g, &gd) == FG_OK) {
            if (fg_gguf_get_u32(g, "deepseek2.nextn_predict_layers", &n) == FG_OK && n <= 1)
                spec.n_nextn = n;
            fg_gguf_close(g);
        }
    }

    if (embd) { /* a wider model: rows of 256 for the K-quant test models */
        uint64_t v;
        if (parse_u64(embd, 65536, &v) || v == 0)
            return bad("--embd wants an integer in 1..65536, not '%s'", embd);
        spec.n_embd = (uint32_t)v;
    }
    char *text = NULL;
    if (bpe_corpus) {
        size_t len = 0;
        if (fg_file_read(bpe_corpus, SIZE_MAX - 1, &text, &len)) {
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
    if (v4) {
        char ratios[4 * FG_MODELGEN_V4_MAX_LAYERS + 1] = "";
        for (uint32_t il = 0; il < spec.n_layer; il++)
            snprintf(ratios + strlen(ratios), sizeof ratios - strlen(ratios), "%s%u", il ? "," : "",
                     spec.v4.ratios[il]);
        printf("preset %s: deepseek4, %u layers + %u MTP, ratios [%s], %u hash, d=%u, %u heads of %u, window %u, "
               "top-k %u, %u experts top-%u, vocab %u, weights %s (embeddings %s, experts %s), seed %" PRIu64 "\n",
               preset, spec.n_layer, spec.v4.n_nextn, ratios, spec.v4.n_hash_layer, spec.n_embd, spec.n_head,
               spec.v4.head_dim, spec.v4.window, spec.v4.indexer_top_k, spec.n_expert, spec.n_expert_used,
               spec.n_vocab, type_name(spec.weight_type), type_name(spec.v4.embd_type),
               type_name(spec.v4.expert_type), spec.seed);
    } else {
        char mtp[32] = "";
        if (spec.n_nextn)
            snprintf(mtp, sizeof mtp, " + %u MTP", spec.n_nextn);
        printf("preset %s: %u layers%s (%u dense), d=%u, %u heads, %u experts top-%u, vocab %u, weights %s, seed %" PRIu64
               "\n",
               preset, spec.n_layer, mtp, spec.n_layer_dense_lead, spec.n_embd, spec.n_head, spec.n_expert,
               spec.n_expert_used, spec.n_vocab, type_name(spec.weight_type), spec.seed);
    }
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

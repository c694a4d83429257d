/* quant_plan.c: quant_plan.h's rules, written from the behaviour of
 * llama.cpp's src/llama-quant.cpp (tensor_allows_quantization,
 * llama_tensor_get_type_impl, tensor_type_fallback) for the mixes whose types
 * this build writes. The branches keep llama.cpp's order, since a tensor can
 * match several; the ones for mixes we refuse (IQ1, TQ) are left out. A
 * mix that chooses a type this build does not write for some tensor fails on
 * that tensor.
 */
#include "engine/model/quant_plan.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/cpu/quantize.h"

enum { /* ggml type ids used by the rules */
    T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8, T_Q2_K = 10,
    T_Q3_K = 11, T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14, T_IQ2_XXS = 16, T_IQ2_XS = 17, T_IQ3_XXS = 18, T_IQ1_S = 19,
    T_IQ4_NL = 20, T_IQ3_S = 21, T_IQ2_S = 22, T_IQ4_XS = 23, T_IQ1_M = 29,
    T_BF16 = 30,
    T_MXFP4 = 39,
};

enum { /* llama.cpp's LLAMA_FTYPE numbers */
    F_ALL_F32 = 0, F_F16 = 1, F_Q4_0 = 2, F_Q4_1 = 3, F_Q8_0 = 7, F_Q5_0 = 8, F_Q5_1 = 9, F_Q2_K = 10,
    F_Q3_K_S = 11, F_Q3_K_M = 12, F_Q3_K_L = 13, F_Q4_K_S = 14, F_Q4_K_M = 15, F_Q5_K_S = 16, F_Q5_K_M = 17,
    F_Q6_K = 18, F_IQ2_XXS = 19, F_IQ2_XS = 20, F_Q2_K_S = 21, F_IQ3_XS = 22, F_IQ3_XXS = 23, F_IQ4_NL = 25,
    F_IQ3_S = 26, F_IQ3_M = 27, F_IQ2_S = 28, F_IQ2_M = 29, F_IQ4_XS = 30, F_BF16 = 32, F_MXFP4_MOE = 38,
};

static const struct ftype_info {
    const char *name;
    int ftype;        /* LLAMA_FTYPE, -1: refused */
    uint32_t type;    /* the default tensor type */
    const char *why;  /* refused: the reason */
} ftypes[] = {
    {"f32", F_ALL_F32, T_F32, NULL},       {"f16", F_F16, T_F16, NULL},
    {"bf16", F_BF16, T_BF16, NULL},        {"q8_0", F_Q8_0, T_Q8_0, NULL},
    {"q4_0", F_Q4_0, T_Q4_0, NULL},        {"q4_1", F_Q4_1, T_Q4_1, NULL},
    {"q5_0", F_Q5_0, T_Q5_0, NULL},        {"q5_1", F_Q5_1, T_Q5_1, NULL},
    {"q2_k", F_Q2_K, T_Q2_K, NULL},        {"q3_k_s", F_Q3_K_S, T_Q3_K, NULL},
    {"q3_k_m", F_Q3_K_M, T_Q3_K, NULL},    {"q3_k", F_Q3_K_M, T_Q3_K, NULL},
    {"q3_k_l", F_Q3_K_L, T_Q3_K, NULL},    {"q4_k_s", F_Q4_K_S, T_Q4_K, NULL},
    {"q4_k_m", F_Q4_K_M, T_Q4_K, NULL},    {"q4_k", F_Q4_K_M, T_Q4_K, NULL},
    {"q5_k_s", F_Q5_K_S, T_Q5_K, NULL},    {"q5_k_m", F_Q5_K_M, T_Q5_K, NULL},
    {"q5_k", F_Q5_K_M, T_Q5_K, NULL},      {"q6_k", F_Q6_K, T_Q6_K, NULL},
    {"iq4_nl", F_IQ4_NL, T_IQ4_NL, NULL},  {"iq4_xs", F_IQ4_XS, T_IQ4_XS, NULL},
    {"mxfp4_moe", F_MXFP4_MOE, T_MXFP4, NULL},
    {"q2_k_s", F_Q2_K_S, T_Q2_K, NULL},
    {"iq3_xxs", F_IQ3_XXS, T_IQ3_XXS, NULL}, {"iq3_xs", F_IQ3_XS, T_IQ3_S, NULL},
    {"iq3_s", F_IQ3_S, T_IQ3_S, NULL},       {"iq3_m", F_IQ3_M, T_IQ3_S, NULL},
    {"iq2_xxs", F_IQ2_XXS, T_IQ2_XXS, NULL}, {"iq2_xs", F_IQ2_XS, T_IQ2_XS, NULL},
    {"iq2_s", F_IQ2_S, T_IQ2_XS, NULL},      {"iq2_m", F_IQ2_M, T_IQ2_S, NULL},
    {"iq1_s", -1, 0, "the IQ1 lattice types are not written yet"},
    {"iq1_m", -1, 0, NULL},  {"tq1_0", -1, 0, "the ternary types are not written"},
    {"tq2_0", -1, 0, NULL},
};
#define N_FTYPES (sizeof ftypes / sizeof ftypes[0])

typedef enum category {
    C_TOKEN_EMBD, C_ATTN_Q, C_ATTN_V, C_ATTN_K, C_ATTN_QKV, C_ATTN_KV_B, C_ATTN_OUTPUT, C_FFN_UP,
    C_FFN_GATE, C_FFN_DOWN, C_OUTPUT, C_OTHER,
} category;

typedef struct override {
    regex_t re;
    uint32_t type;
} override;

struct fg_quant_plan {
    const struct ftype_info *ft;
    override *ov;
    size_t n_ov;
    /* the model */
    int n_layer, n_expert, n_gqa;
    bool falcon, tied_embeddings;
    bool has_imatrix; /* llama-quantize's qs.has_imatrix: some rules differ with one */
    int n_attention_wv;
    /* llama-quantize's counters, advanced per chosen tensor */
    int i_attention_wv, i_ffn_down, i_ffn_gate, i_ffn_up;
};

static void ftype_list(char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; i < N_FTYPES && len < cap; i++)
        if (ftypes[i].ftype >= 0)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? " " : "", ftypes[i].name);
}

fg_err fg_quant_plan_create(const char *ftype, fg_quant_plan_t **out, fg_diag *diag)
{
    char names[256];
    *out = NULL;
    if (!ftype)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "no type given");
    ftype_list(names, sizeof names);
    const struct ftype_info *ft = NULL;
    const char *why = NULL;
    for (size_t i = 0; i < N_FTYPES; i++) {
        if (ftypes[i].why)
            why = ftypes[i].why;
        if (strcasecmp(ftypes[i].name, ftype) == 0) {
            ft = &ftypes[i];
            break;
        }
    }
    if (!ft)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "unknown type '%s'; flashgate-quantize writes: %s", ftype, names);
    if (ft->ftype < 0)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "type '%s' cannot be written: %s; flashgate-quantize writes: %s",
                           ftype, why, names);
    fg_quant_plan_t *p = calloc(1, sizeof *p);
    if (!p)
        return fg_diag_set(diag, FG_ERR_NOMEM, "out of memory");
    p->ft = ft;
    p->n_gqa = 1;
    p->tied_embeddings = true;
    *out = p;
    return FG_OK;
}

void fg_quant_plan_destroy(fg_quant_plan_t *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_ov; i++)
        regfree(&p->ov[i].re);
    free(p->ov);
    free(p);
}

int fg_quant_type_from_name(const char *name)
{
    for (uint32_t t = 0; t < 64; t++) {
        const char *n = fg_ggml_type_name(t);
        if (n && strcasecmp(n, name) == 0)
            return (int)t;
    }
    return -1;
}

static void type_list(char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (uint32_t t = 0; t < 64 && len < cap; t++)
        if (fg_wtype_quantizes((int)t) && fg_ggml_type_name(t))
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? " " : "", fg_ggml_type_name(t));
}

/* An upper bound on the atoms glibc's regcomp expands PAT into: it copies a
 * repeated atom once per count, so nested counts multiply ("(.?){255}{255}"
 * takes gigabytes, ".{255}{255}{255}" overflows the stack). A pattern over
 * PATTERN_MAX_ATOMS is refused before regcomp sees it. */
#define PATTERN_MAX_ATOMS 4096.0
#define PATTERN_MAX_DEPTH 32

static const char *bracket_end(const char *s)
{
    s++; /* '[' */
    if (*s == '^')
        s++;
    if (*s == ']')
        s++;
    for (; *s && *s != ']'; s++)
        if (*s == '[' && (s[1] == ':' || s[1] == '.' || s[1] == '=')) {
            const char *e = strchr(s + 2, s[1]);
            while (e && e[1] != ']')
                e = strchr(e + 1, s[1]);
            if (!e)
                return s + strlen(s);
            s = e + 1;
        }
    return *s ? s + 1 : s;
}

/* The count of "{m}", "{m,}" or "{m,n}" at S as the copies it makes, and its
 * end in *END; 0 when S is not an interval (regcomp then refuses or reads it
 * literally). */
static double interval_copies(const char *s, const char **end)
{
    double m = 0, n = -1;
    const char *p = s + 1;
    if (*p < '0' || *p > '9')
        return 0;
    while (*p >= '0' && *p <= '9')
        m = m * 10 + (*p++ - '0');
    if (*p == ',') {
        p++;
        if (*p >= '0' && *p <= '9') {
            n = 0;
            while (*p >= '0' && *p <= '9')
                n = n * 10 + (*p++ - '0');
        } else {
            n = m + 1; /* unbounded: the count plus a star */
        }
    }
    if (*p != '}')
        return 0;
    *end = p + 1;
    return (n > m ? n : m) + 1;
}

static double pattern_atoms(const char *s, int *too_deep)
{
    double alts[PATTERN_MAX_DEPTH + 1], seq[PATTERN_MAX_DEPTH + 1], last[PATTERN_MAX_DEPTH + 1];
    int d = 0;
    alts[0] = seq[0] = last[0] = 0;
    while (*s) {
        double factor = 0;
        const char *next = s + 1;
        if (*s == '(') {
            if (d == PATTERN_MAX_DEPTH) {
                *too_deep = 1;
                return 0;
            }
            d++;
            alts[d] = seq[d] = last[d] = 0;
            s = next;
            continue;
        }
        if (*s == ')' && d > 0) {
            double g = alts[d] + seq[d] + 1;
            d--;
            seq[d] += g;
            last[d] = g;
        } else if (*s == '|') {
            alts[d] += seq[d];
            seq[d] = last[d] = 0;
        } else if (*s == '*' || *s == '+' || *s == '?') {
            factor = 2;
        } else if (*s == '{' && (factor = interval_copies(s, &next)) != 0) {
            /* a counted repetition */
        } else {
            if (*s == '[')
                next = bracket_end(s);
            else if (*s == '\\' && s[1])
                next = s + 2;
            seq[d] += 1;
            last[d] = 1;
        }
        if (factor != 0) {
            seq[d] += last[d] * (factor - 1);
            last[d] *= factor;
            if (seq[d] > PATTERN_MAX_ATOMS)
                return seq[d];
        }
        s = next;
    }
    double total = 0;
    for (; d >= 0; d--)
        total += alts[d] + seq[d];
    return total;
}

fg_err fg_quant_plan_add_override(fg_quant_plan_t *p, const char *arg, fg_diag *diag)
{
    char types[256];
    type_list(types, sizeof types);
    const char *eq = arg ? strrchr(arg, '=') : NULL;
    if (!eq)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "override '%s' is not PATTERN=TYPE", arg ? arg : "");
    if (eq == arg)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "override '%s' has an empty pattern", arg);
    int t = fg_quant_type_from_name(eq + 1);
    if (t < 0)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "override '%s': unknown type '%s'; types written: %s", arg,
                           eq + 1, types);
    if (!fg_wtype_quantizes(t))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "override '%s': type %s is not written by this build; types "
                           "written: %s", arg, eq + 1, types);
    size_t plen = (size_t)(eq - arg);
    char *pat = malloc(plen + 1);
    override *ov = realloc(p->ov, (p->n_ov + 1) * sizeof *ov);
    if (!pat || !ov) {
        free(pat);
        if (ov)
            p->ov = ov;
        return fg_diag_set(diag, FG_ERR_NOMEM, "out of memory");
    }
    p->ov = ov;
    memcpy(pat, arg, plen);
    pat[plen] = 0;
    int too_deep = 0;
    double atoms = pattern_atoms(pat, &too_deep);
    if (too_deep || atoms > PATTERN_MAX_ATOMS) {
        fg_err e = too_deep ? fg_diag_set(diag, FG_ERR_INVALID_ARG, "override '%s': pattern '%s' nests groups more "
                                          "than %d deep", arg, pat, PATTERN_MAX_DEPTH)
                            : fg_diag_set(diag, FG_ERR_INVALID_ARG, "override '%s': pattern '%s' repeats too much "
                                          "(it expands past %.0f atoms); use fewer or smaller nested counts", arg,
                                          pat, PATTERN_MAX_ATOMS);
        free(pat);
        return e;
    }
    int rc = regcomp(&ov[p->n_ov].re, pat, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char msg[128];
        regerror(rc, &ov[p->n_ov].re, msg, sizeof msg);
        fg_err e = fg_diag_set(diag, FG_ERR_INVALID_ARG, "override '%s': pattern '%s' is not a regular expression: "
                               "%s", arg, pat, msg);
        free(pat);
        return e;
    }
    free(pat);
    ov[p->n_ov].type = (uint32_t)t;
    p->n_ov++;
    return FG_OK;
}

static category category_of(const char *name)
{
    if (strcmp(name, "output.weight") == 0)
        return C_OUTPUT;
    if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "per_layer_token_embd.weight") == 0)
        return C_TOKEN_EMBD;
    static const struct {
        const char *sub;
        category c;
    } subs[] = {
        {"attn_qkv.weight", C_ATTN_QKV}, {"attn_kv_b.weight", C_ATTN_KV_B}, {"attn_v.weight", C_ATTN_V},
        {"attn_k.weight", C_ATTN_K},     {"attn_q.weight", C_ATTN_Q},       {"attn_output.weight", C_ATTN_OUTPUT},
        {"ffn_up", C_FFN_UP},            {"ffn_gate", C_FFN_GATE},          {"ffn_down", C_FFN_DOWN},
    };
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (strstr(name, subs[i].sub))
            return subs[i].c;
    return C_OTHER;
}

/* The mixes of llama_tensor_get_type_impl's low-bit branch (there with IQ1_S
 * and IQ1_M), and those of them that keep more bits (IQ3_S, not Q2_K). */
static bool low_bit_mix(int f)
{
    return f == F_IQ2_XXS || f == F_IQ2_XS || f == F_IQ2_S || f == F_IQ2_M;
}

static bool iq2_s_or_m(int f)
{
    return f == F_IQ2_S || f == F_IQ2_M;
}

static bool attn_v_like(category c)
{
    return c == C_ATTN_V || c == C_ATTN_QKV || c == C_ATTN_KV_B;
}

static fg_err arch_u32(const fg_gguf_t *g, const char *arch, const char *key, uint32_t *v)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return fg_gguf_get_u32(g, full, v);
}

fg_err fg_quant_plan_begin(fg_quant_plan_t *p, const fg_gguf_t *g, fg_diag *diag)
{
    fg_gguf_str s;
    char arch[64] = "";
    if (fg_gguf_get_str(g, "general.architecture", &s) == FG_OK && s.len < sizeof arch) {
        memcpy(arch, s.ptr, (size_t)s.len);
        arch[s.len] = 0;
    }
    uint32_t n_layer = 0, n_expert = 0, n_head = 0, n_head_kv = 0;
    if (arch_u32(g, arch, "block_count", &n_layer) != FG_OK || n_layer == 0 || n_layer > 100000)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "%s.block_count is missing or not a layer count", arch);
    (void)arch_u32(g, arch, "expert_count", &n_expert);
    if (arch_u32(g, arch, "attention.head_count", &n_head) == FG_OK && n_head > 0) {
        if (arch_u32(g, arch, "attention.head_count_kv", &n_head_kv) != FG_OK || n_head_kv == 0)
            n_head_kv = n_head;
        p->n_gqa = (int)(n_head / n_head_kv);
    }
    p->n_layer = (int)n_layer;
    p->n_expert = n_expert > 100000 ? 100000 : (int)n_expert;
    p->falcon = strcmp(arch, "falcon") == 0;
    for (uint64_t i = 0; i < fg_gguf_tensor_count(g); i++) {
        category c = category_of(fg_gguf_tensor_at(g, i)->name);
        if (attn_v_like(c))
            p->n_attention_wv++;
        if (c == C_OUTPUT)
            p->tied_embeddings = false;
    }
    return FG_OK;
}

uint32_t fg_quant_plan_file_type(const fg_quant_plan_t *p)
{
    return (uint32_t)p->ft->ftype;
}

bool fg_quant_plan_requires_imatrix(const fg_quant_plan_t *p)
{
    return p->ft->ftype == F_Q2_K_S;
}

void fg_quant_plan_set_imatrix(fg_quant_plan_t *p, bool has_imatrix)
{
    p->has_imatrix = has_imatrix;
}

bool fg_quant_plan_tensor_needs_imatrix(const fg_quant_plan_t *p, const char *name, uint32_t type)
{
    category c = category_of(name);
    if (c == C_TOKEN_EMBD || c == C_OUTPUT)
        return false;
    switch (type) { /* tensor_requires_imatrix: the lattice types but IQ3_S */
    case T_IQ3_XXS:
    case T_IQ2_XXS:
    case T_IQ2_XS:
    case T_IQ2_S:
    case T_IQ1_S:
    case T_IQ1_M: return true;
    case T_Q2_K: return p->ft->ftype == F_Q2_K_S;
    default: return false;
    }
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

static int n_dims_of(const fg_gguf_tensor *t)
{
    for (int i = FG_GGUF_MAX_DIMS - 1; i >= 1; i--)
        if ((uint32_t)i < t->n_dims && t->ne[i] > 1)
            return i + 1;
    return 1;
}

/* llama.cpp's tensor_allows_quantization (quantize_output_tensor on). */
static bool allows_quantization(const char *name, const fg_gguf_tensor *t)
{
    static const char *const kept[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
        "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
        "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
        "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
        "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
        "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
        "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
    };
    if (n_dims_of(t) < 2 || !ends_with(name, "weight"))
        return false;
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        if (strstr(name, kept[i]))
            return false;
    return strcmp(name, "position_embd.weight") != 0 && strcmp(name, "token_types.weight") != 0;
}

static bool use_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The layer a tensor belongs to: from its name when the model has experts
 * (their tensors are not in layer order in every file), else the counter. */
static fg_err layer_of(const fg_quant_plan_t *p, const char *name, int counter, int *layer, fg_diag *diag)
{
    *layer = counter;
    if (p->n_expert > 1) {
        if (sscanf(name, "blk.%d.", layer) != 1)
            return fg_diag_set(diag, FG_ERR_MODEL_SHAPE, "tensor %s: no layer number in its name", name);
        if (*layer < 0 || *layer >= p->n_layer)
            return fg_diag_set(diag, FG_ERR_MODEL_SHAPE, "tensor %s: layer %d outside the %d blocks", name, *layer,
                               p->n_layer);
    }
    return FG_OK;
}

static uint32_t block_elems(uint32_t type)
{
    uint32_t elems = 1, bytes = 0;
    (void)fg_ggml_type_size(type, &elems, &bytes);
    return elems ? elems : 1;
}

/* llama_tensor_get_type_impl for the mixes we write. */
static fg_err mix_type(fg_quant_plan_t *p, const fg_gguf_tensor *t, category c, uint32_t *type, fg_diag *diag)
{
    const int f = p->ft->ftype;
    const char *name = t->name;
    uint32_t nt = *type;
    int layer = 0;
    if (c == C_OUTPUT || (p->tied_embeddings && c == C_TOKEN_EMBD)) {
        if (f == F_MXFP4_MOE || p->falcon || t->ne[0] % block_elems(nt) != 0)
            nt = T_Q8_0;
        else if (f == F_IQ3_XXS || low_bit_mix(f))
            nt = T_Q5_K;
        else if (nt != T_Q8_0)
            nt = T_Q6_K;
    } else if (f == F_MXFP4_MOE) {
        nt = t->n_dims > 2 && t->ne[2] > 1 ? T_MXFP4 : T_Q8_0;
    } else if (c == C_TOKEN_EMBD) {
        if (f == F_IQ2_XXS || f == F_IQ2_XS) /* and the IQ1 and ternary mixes */
            nt = T_Q2_K;
        else if (iq2_s_or_m(f) || f == F_IQ3_XXS)
            nt = T_IQ3_S;
    } else if (low_bit_mix(f)) {
        const uint32_t more = iq2_s_or_m(f) ? T_IQ3_S : T_Q2_K;
        if (attn_v_like(c)) {
            nt = p->n_gqa >= 4 || p->n_expert >= 4 ? T_Q4_K : more;
            p->i_attention_wv++;
        } else if (p->n_expert == 8 && c == C_ATTN_K) {
            nt = T_Q4_K;
        } else if (c == C_FFN_DOWN) { /* by the counter, not the layer in the name */
            if (p->i_ffn_down < p->n_layer / 8)
                nt = more;
            p->i_ffn_down++;
        } else if (c == C_ATTN_OUTPUT) {
            if (p->n_expert == 8)
                nt = T_Q5_K;
            else if (iq2_s_or_m(f))
                nt = T_IQ3_S;
        }
    } else if (attn_v_like(c)) {
        if (f == F_Q2_K)
            nt = p->n_gqa >= 4 ? T_Q4_K : T_Q3_K;
        else if (f == F_Q2_K_S && p->n_gqa >= 4)
            nt = T_Q4_K;
        else if (f == F_IQ3_XXS)
            nt = p->n_gqa >= 4 ? T_Q4_K : !p->has_imatrix ? T_IQ3_S : T_IQ3_XXS;
        else if ((f == F_IQ3_XS || f == F_IQ3_S) && p->n_gqa >= 4)
            nt = T_Q4_K;
        else if (f == F_IQ3_M)
            nt = T_Q4_K;
        else if (f == F_Q3_K_M)
            nt = p->i_attention_wv < 2 ? T_Q5_K : T_Q4_K;
        else if (f == F_Q3_K_L)
            nt = T_Q5_K;
        else if ((f == F_IQ4_NL || f == F_IQ4_XS) && p->n_gqa >= 4)
            nt = T_Q5_K;
        else if ((f == F_Q4_K_M || f == F_Q5_K_M) && use_more_bits(p->i_attention_wv, p->n_attention_wv))
            nt = T_Q6_K;
        else if (f == F_Q4_K_S && p->i_attention_wv < 4)
            nt = T_Q5_K;
        if (p->n_expert == 8)
            nt = T_Q8_0;
        p->i_attention_wv++;
    } else if (c == C_ATTN_K) {
        if (p->n_expert == 8)
            nt = T_Q8_0;
        else if (f == F_IQ3_XS)
            nt = T_IQ3_XXS;
        else if (f == F_IQ3_XXS)
            nt = T_IQ2_S;
    } else if (c == C_ATTN_Q) {
        if (f == F_IQ3_XS)
            nt = T_IQ3_XXS;
        else if (f == F_IQ3_XXS)
            nt = T_IQ2_S;
    } else if (c == C_FFN_DOWN) {
        FG_TRY(layer_of(p, name, p->i_ffn_down, &layer, diag));
        const int n = p->n_layer;
        if (f == F_Q2_K)
            nt = T_Q3_K;
        else if (f == F_Q2_K_S) {
            if (layer < n / 8)
                nt = T_Q4_K;
        } else if (f == F_IQ3_XXS && !p->has_imatrix)
            nt = layer < n / 8 ? T_Q4_K : T_Q3_K;
        else if (f == F_Q3_K_M)
            nt = layer < n / 16 ? T_Q5_K : !p->falcon || use_more_bits(layer, n) ? T_Q4_K : T_Q3_K;
        else if (f == F_IQ3_M && (layer < n / 8 || (p->n_expert == 8 && use_more_bits(layer, n))))
            nt = T_Q4_K;
        else if (f == F_Q3_K_L)
            nt = p->falcon ? T_Q4_K : T_Q5_K;
        else if (f == F_Q4_K_M) {
            if (p->falcon)
                nt = layer < n / 16 ? T_Q6_K : use_more_bits(layer, n) ? T_Q5_K : T_Q4_K;
            else if (use_more_bits(layer, n))
                nt = T_Q6_K;
        } else if (layer < n / 8 && (f == F_IQ4_NL || f == F_IQ4_XS) && !p->has_imatrix)
            nt = T_Q5_K;
        else if (f == F_Q5_K_M && use_more_bits(layer, n))
            nt = T_Q6_K;
        else if (f == F_Q4_K_S && !p->falcon && layer < n / 8)
            nt = T_Q5_K;
        else if ((f == F_Q4_0 || f == F_Q5_0) && p->has_imatrix && layer < n / 8)
            nt = f == F_Q4_0 ? T_Q4_1 : T_Q5_1; /* llama.cpp's guard for the first ffn_down layers */
        p->i_ffn_down++;
    } else if (c == C_ATTN_OUTPUT) {
        if (!p->falcon) {
            if (p->n_expert == 8) {
                if (f == F_Q2_K || f == F_IQ3_XS || f == F_IQ3_XXS || f == F_Q3_K_S || f == F_Q3_K_M ||
                    f == F_IQ4_NL || f == F_Q4_K_S || f == F_Q4_K_M || f == F_IQ3_S || f == F_IQ3_M || f == F_IQ4_XS)
                    nt = T_Q5_K;
            } else if (f == F_Q2_K)
                nt = T_Q3_K;
            else if (f == F_IQ3_XXS)
                nt = T_IQ3_S;
            else if (f == F_Q3_K_M)
                nt = T_Q4_K;
            else if (f == F_Q3_K_L)
                nt = T_Q5_K;
            else if (f == F_IQ3_M)
                nt = T_Q4_K;
        } else if (f == F_Q3_K_L)
            nt = T_Q4_K;
    } else if (c == C_ATTN_QKV) {
        if (f == F_Q3_K_M || f == F_Q3_K_L || f == F_IQ3_M)
            nt = T_Q4_K;
        else if (f == F_Q4_K_M)
            nt = T_Q5_K;
        else if (f == F_Q5_K_M)
            nt = T_Q6_K;
    } else if (c == C_FFN_GATE) {
        FG_TRY(layer_of(p, name, p->i_ffn_gate, &layer, diag));
        if (f == F_IQ3_XS && layer >= p->n_layer / 8 && layer < 7 * p->n_layer / 8)
            nt = T_IQ3_XXS;
        p->i_ffn_gate++;
    } else if (c == C_FFN_UP) {
        FG_TRY(layer_of(p, name, p->i_ffn_up, &layer, diag));
        if (f == F_IQ3_XS && layer >= p->n_layer / 8 && layer < 7 * p->n_layer / 8)
            nt = T_IQ3_XXS;
        p->i_ffn_up++;
    }
    *type = nt;
    return FG_OK;
}

/* tensor_type_fallback: rows that the type's blocks do not divide. */
static fg_err row_fallback(const fg_gguf_tensor *t, fg_quant_choice *ch, fg_diag *diag)
{
    const int64_t ncols = t->ne[0];
    if (ncols % block_elems(ch->wanted) == 0)
        return FG_OK;
    uint32_t r;
    switch (ch->wanted) {
    case T_IQ2_XXS:
    case T_IQ2_XS:
    case T_IQ2_S:
    case T_IQ3_XXS:
    case T_IQ3_S:
    case T_IQ4_XS: r = T_IQ4_NL; break;
    case T_Q2_K:
    case T_Q3_K: r = T_Q4_0; break;
    case T_Q4_K: r = T_Q5_0; break;
    case T_Q5_K: r = T_Q5_1; break;
    case T_Q6_K: r = T_Q8_0; break;
    default:
        return fg_diag_set(diag, FG_ERR_MODEL_SHAPE, "tensor %s: rows of %lld values are not a whole number of %s "
                           "blocks and %s has no fallback type", t->name, (long long)ncols,
                           fg_ggml_type_name(ch->wanted), fg_ggml_type_name(ch->wanted));
    }
    if (ncols % block_elems(r) != 0)
        r = T_F16;
    ch->type = r;
    ch->fallback = true;
    return FG_OK;
}

static bool is_block_type(uint32_t type)
{
    return type != T_F32 && type != T_F16 && type != T_BF16;
}

fg_err fg_quant_plan_choose(fg_quant_plan_t *p, const fg_gguf_tensor *t, fg_quant_choice *out, fg_diag *diag)
{
    memset(out, 0, sizeof *out);
    out->type = out->wanted = t->type;
    if (!allows_quantization(t->name, t))
        return FG_OK;
    out->quantizable = true;
    uint32_t nt = p->ft->type;
    if (is_block_type(nt)) { /* llama-quantize applies mixes and overrides only to quantized types */
        for (size_t i = 0; i < p->n_ov; i++)
            if (regexec(&p->ov[i].re, t->name, 0, NULL, 0) == 0) {
                nt = p->ov[i].type;
                out->manual = true;
                break;
            }
        if (!out->manual)
            FG_TRY(mix_type(p, t, category_of(t->name), &nt, diag));
    }
    out->type = out->wanted = nt;
    if (is_block_type(nt) && !fg_wtype_quantizes((int)nt))
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "tensor %s: the %s mix chooses %s, which this build does not "
                           "write", t->name, p->ft->name, fg_ggml_type_name(nt));
    return is_block_type(nt) ? row_fallback(t, out, diag) : FG_OK;
}

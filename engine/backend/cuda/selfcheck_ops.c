/* selfcheck_ops.c: the per-op GPU checks of selfcheck.h. Each case builds
 * random inputs on the host, runs the CPU reference, uploads the inputs, runs
 * the CUDA launcher, copies the output back and compares. Errors of the CUDA
 * runtime count as failures with their message; nothing aborts.
 */
#include "engine/backend/cuda/selfcheck.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/deepseek2/model.h"
#include "engine/model/deepseek2/moe_route.h"
#include "engine/model/deepseek4/model.h"
#include "engine/model/rope.h"
#include "kernels/cpu/ds4_ops.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/mla_attn.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/vecops.h"
#include "kernels/cuda/ds4_attn.cuh"
#include "kernels/cuda/ds4_compress.cuh"
#include "kernels/cuda/ds4_hc.cuh"
#include "kernels/cuda/ds4_index.cuh"
#include "kernels/cuda/kv_write.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/mla_attn.cuh"
#include "kernels/cuda/moe_experts.cuh"
#include "kernels/cuda/moe_route.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/sample.cuh"
#include "kernels/cuda/vecops.cuh"

#define GUARD 256          /* bytes on each side of a device buffer; keeps 256-byte alignment */
#define GUARD_BYTE 0xa5

typedef struct ctx {
    FILE *out;
    fg_cuda_launch launch;
    int failed, cases;
    uint64_t rng;
    fg_pool_t *pool;
} ctx;

static float frand(ctx *c) /* uniform in [-1, 1) */
{
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return (float)((c->rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static void fill(ctx *c, float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = frand(c) * scale;
}

/* ---- device buffers with guards ---- */

typedef struct dbuf {
    uint8_t *base;
    size_t bytes;
} dbuf;

static void *dnew(dbuf *b, size_t bytes)
{
    b->bytes = bytes;
    b->base = NULL;
    if (cudaMalloc((void **)&b->base, bytes + 2 * GUARD) != cudaSuccess ||
        cudaMemset(b->base, GUARD_BYTE, bytes + 2 * GUARD) != cudaSuccess) {
        b->base = NULL;
        return NULL;
    }
    return b->base + GUARD;
}

static void *dput(dbuf *b, const void *host, size_t bytes)
{
    void *d = dnew(b, bytes);
    if (d && cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
        return NULL;
    return d;
}

static int dget(const dbuf *b, void *host, size_t bytes)
{
    return b->base && cudaMemcpy(host, b->base + GUARD, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
}

/* 1 when both guard regions still hold GUARD_BYTE. */
static int guards_ok(const dbuf *b)
{
    uint8_t g[2 * GUARD];
    if (!b->base || cudaMemcpy(g, b->base, GUARD, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(g + GUARD, b->base + GUARD + b->bytes, GUARD, cudaMemcpyDeviceToHost) != cudaSuccess)
        return 0;
    for (int i = 0; i < 2 * GUARD; i++)
        if (g[i] != GUARD_BYTE)
            return 0;
    return 1;
}

static void dfree(dbuf *b)
{
    if (b->base)
        cudaFree(b->base);
    b->base = NULL;
}

/* ---- reporting ---- */

static void report(ctx *c, const char *op, const char *variant, int ok, const char *fmt, double a, double b)
{
    char detail[160];
    snprintf(detail, sizeof detail, fmt, a, b);
    c->cases++;
    if (!ok)
        c->failed++;
    const char *line_fmt = "%-14s %-26s %-4s %s\n";
    printf(line_fmt, op, variant, ok ? "ok" : "FAIL", detail);
    if (c->out)
        fprintf(c->out, line_fmt, op, variant, ok ? "ok" : "FAIL", detail);
}

/* Compares n floats: NaN/Inf apart, then nmse against tol. */
static void compare(ctx *c, const char *op, const char *variant, const float *ref, const float *got, size_t n,
                    double tol, int guards)
{
    double num = 0, den = 0;
    size_t nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(ref[i]) && !isfinite(got[i])) {
            nonfinite++;
            continue;
        }
        const double dlt = (double)got[i] - (double)ref[i];
        num += dlt * dlt;
        den += (double)ref[i] * ref[i];
    }
    const double nmse = den > 0 ? num / den : num;
    const int ok = nonfinite == 0 && guards && nmse <= tol;
    if (nonfinite || !guards)
        report(c, op, variant, 0, guards ? "non-finite outputs: %.0f (nmse %.3g)" : "guard bytes overwritten (%.0f, %.3g)",
               (double)nonfinite, nmse);
    else
        report(c, op, variant, ok, "nmse %.3g (tolerance %.0e)", nmse, tol);
}

static int launched(ctx *c, const char *op, const char *variant, fg_cuda_status s)
{
    cudaError_t e = s == FG_CUDA_OK ? cudaDeviceSynchronize() : cudaSuccess;
    if (s == FG_CUDA_OK && e == cudaSuccess)
        return 1;
    char msg[200];
    snprintf(msg, sizeof msg, "launch: %s, runtime: %s", fg_cuda_status_name(s), cudaGetErrorString(e));
    c->cases++;
    c->failed++;
    printf("%-14s %-26s FAIL %s\n", op, variant, msg);
    if (c->out)
        fprintf(c->out, "%-14s %-26s FAIL %s\n", op, variant, msg);
    cudaGetLastError();
    return 0;
}

/* ---- ops ---- */

static void check_rmsnorm(ctx *c)
{
    const int rows = 7, n = 7168;
    float *x = malloc(sizeof(float) * rows * n), *w = malloc(sizeof(float) * n);
    float *ref = malloc(sizeof(float) * rows * n), *got = malloc(sizeof(float) * rows * n);
    fill(c, x, (size_t)rows * n, 3.0f);
    fill(c, w, (size_t)n, 1.0f);
    for (int r = 0; r < rows; r++)
        fg_rmsnorm(ref + (size_t)r * n, x + (size_t)r * n, w, n, 1e-6f);
    dbuf bx, bw, by;
    fg_cuda_rmsnorm_params p = {.y = dnew(&by, sizeof(float) * rows * n), .x = dput(&bx, x, sizeof(float) * rows * n),
                                .w = dput(&bw, w, sizeof(float) * n), .y_stride = n, .x_stride = n, .n_rows = rows,
                                .n = n, .eps = 1e-6f};
    if (launched(c, "rmsnorm", "7x7168", fg_cuda_rmsnorm(&p, &c->launch)) && dget(&by, got, sizeof(float) * rows * n))
        compare(c, "rmsnorm", "7x7168", ref, got, (size_t)rows * n, 1e-10, guards_ok(&by));
    dfree(&bx), dfree(&bw), dfree(&by);
    free(x), free(w), free(ref), free(got);
}

static void check_rope(ctx *c, float yarn)
{
    fg_hparams hp = {.n_rope = 64, .n_nope = 128, .rope_base = 10000.0f, .yarn_factor = yarn, .yarn_orig_ctx = 4096,
                     .yarn_log_mul = yarn > 0 ? 0.1f : 0.0f};
    fg_rope r;
    if (fg_rope_init(&r, &hp, NULL) != FG_OK)
        return;
    const int n_tok = 5, H = 16, stride = 192;
    int pos[5] = {0, 1, 4095, 70000, 163839};
    const size_t n = (size_t)n_tok * H * stride;
    float *x = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    fill(c, x, n, 2.0f);
    memcpy(ref, x, sizeof(float) * n);
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < H; h++)
            fg_rope_apply(&r, ref + ((size_t)t * H + h) * stride + 128, pos[t]);
    double inv[32];
    for (int i = 0; i < 32; i++)
        inv[i] = r.inv_freq[i];
    dbuf bx, bp, bf;
    fg_cuda_rope_params p = {.x = dput(&bx, x, sizeof(float) * n), .tok_stride = (int64_t)H * stride,
                             .vec_stride = stride, .n_tok = n_tok, .n_vec = H, .n_dims = 64,
                             .pos = dput(&bp, pos, sizeof pos), .inv_freq = dput(&bf, inv, sizeof inv),
                             .mscale = r.mscale};
    p.x = p.x ? (float *)p.x + 128 : NULL;
    const char *v = yarn > 0 ? "yarn40 5 tok x 16 heads" : "plain 5 tok x 16 heads";
    if (launched(c, "rope", v, fg_cuda_rope(&p, &c->launch)) && dget(&bx, got, sizeof(float) * n))
        compare(c, "rope", v, ref, got, n, 1e-10, guards_ok(&bx));
    dfree(&bx), dfree(&bp), dfree(&bf);
    free(x), free(ref), free(got);
}

/* Random weights [n_mat][n_out][n_in] of a type, built from floats. */
static uint8_t *make_weights(ctx *c, int wtype, int n_in, int n_out, int n_mat, size_t *mat_bytes)
{
    const size_t row = fg_wtype_row_bytes(wtype, n_in);
    *mat_bytes = row * (size_t)n_out;
    uint8_t *w = malloc(*mat_bytes * (size_t)n_mat);
    float *f = malloc(sizeof(float) * (size_t)n_in);
    for (size_t r = 0; r < (size_t)n_out * n_mat; r++) {
        fill(c, f, (size_t)n_in, 0.05f);
        uint8_t *dst = w + r * row;
        for (int i = 0; i < n_in; i++) {
            if (wtype == FG_WTYPE_F32)
                memcpy(dst + 4 * i, &f[i], 4);
            else if (wtype == FG_WTYPE_F16 || wtype == FG_WTYPE_BF16) {
                uint16_t h = wtype == FG_WTYPE_F16 ? fg_f32_to_f16(f[i]) : fg_f32_to_bf16(f[i]);
                memcpy(dst + 2 * i, &h, 2);
            }
        }
        if (wtype == FG_WTYPE_Q8_0)
            fg_quantize_row_q8_0(f, (fg_block_q8_0 *)dst, n_in);
        if (wtype == FG_WTYPE_MXFP4)
            (void)fg_quantize_row_mxfp4(f, (fg_block_mxfp4 *)dst, n_in); /* n_in % 32 == 0 here */
    }
    free(f);
    return w;
}

static const char *wtype_name(int t)
{
    return t == FG_WTYPE_F32    ? "f32"
           : t == FG_WTYPE_F16  ? "f16"
           : t == FG_WTYPE_BF16 ? "bf16"
           : t == FG_WTYPE_Q8_0 ? "q8_0"
                                : "mxfp4";
}

static void check_matmul(ctx *c, int wtype, int n_in, int n_out, int n_tok, int n_mat)
{
    size_t mb;
    uint8_t *w = make_weights(c, wtype, n_in, n_out, n_mat, &mb);
    const size_t nx = (size_t)n_mat * n_tok * n_in, ny = (size_t)n_mat * n_tok * n_out;
    float *x = malloc(sizeof(float) * nx), *ref = malloc(sizeof(float) * ny), *got = malloc(sizeof(float) * ny);
    fill(c, x, nx, 1.0f);
    void *scratch = malloc(fg_matmul_scratch_bytes(wtype, n_in, n_tok) + 64);
    void *al = (void *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    /* Reference: matrix m over rows of x laid out [n_tok][n_mat][n_in] (column blocks), as the per-head products. */
    float *xm = malloc(sizeof(float) * (size_t)n_tok * n_in), *ym = malloc(sizeof(float) * (size_t)n_tok * n_out);
    for (int m = 0; m < n_mat; m++) {
        for (int t = 0; t < n_tok; t++)
            memcpy(xm + (size_t)t * n_in, x + ((size_t)t * n_mat + m) * n_in, sizeof(float) * n_in);
        fg_matmul(c->pool, FG_ISA_SCALAR, wtype, w + (size_t)m * mb, n_in, n_out, xm, n_tok, ym, al);
        for (int t = 0; t < n_tok; t++)
            memcpy(ref + ((size_t)t * n_mat + m) * n_out, ym + (size_t)t * n_out, sizeof(float) * n_out);
    }
    dbuf bw, bx, by, bs;
    const size_t sb = fg_cuda_matmul_scratch_bytes(wtype, n_in, n_tok, n_mat);
    fg_cuda_matmul_params p = {.wtype = wtype, .w = dput(&bw, w, mb * n_mat), .w_mat_bytes = mb, .n_in = n_in,
                               .n_out = n_out, .n_tok = n_tok, .n_mat = n_mat, .x = dput(&bx, x, sizeof(float) * nx),
                               .x_stride = (int64_t)n_mat * n_in, .x_mat_stride = n_in,
                               .y = dnew(&by, sizeof(float) * ny), .y_stride = (int64_t)n_mat * n_out,
                               .y_mat_stride = n_out, .q8_scratch = sb ? dnew(&bs, sb) : NULL};
    if (!sb)
        bs.base = NULL;
    char v[64];
    snprintf(v, sizeof v, "%s %dx%d tok %d mats %d", wtype_name(wtype), n_out, n_in, n_tok, n_mat);
    if (launched(c, "matmul", v, fg_cuda_matmul(&p, &c->launch)) && dget(&by, got, sizeof(float) * ny))
        compare(c, "matmul", v, ref, got, ny, 1e-7, guards_ok(&by));
    dfree(&bw), dfree(&bx), dfree(&by), dfree(&bs);
    free(w), free(x), free(ref), free(got), free(scratch), free(xm), free(ym);
}

/* Rows of a layer's cache written on the GPU must equal fg_kv_quantize's bytes. */
static void check_kv_write(ctx *c, int format)
{
    const int L = 512, R = 64, n_tok = 9;
    const size_t lat = fg_kv_bytes((fg_kv_format)format, L), rb = (lat + fg_kv_bytes((fg_kv_format)format, R) + 3) & ~(size_t)3;
    float *src = malloc(sizeof(float) * n_tok * (L + R));
    fill(c, src, (size_t)n_tok * (L + R), 4.0f);
    src[3] = 0.0f, src[L + 1] = 300.0f; /* an outlier */
    for (int i = 0; i < 16; i++)
        src[(size_t)(L + R) + 32 + i] = 0.0f; /* an all-zero FP4 block */
    uint8_t *ref = calloc((size_t)n_tok, rb), *got = malloc((size_t)n_tok * rb);
    for (int t = 0; t < n_tok; t++) {
        fg_kv_quantize((fg_kv_format)format, src + (size_t)t * (L + R), L, ref + (size_t)t * rb);
        fg_kv_quantize((fg_kv_format)format, src + (size_t)t * (L + R) + L, R, ref + (size_t)t * rb + lat);
    }
    dbuf bs, bk, br;
    uint8_t *dk = dnew(&bk, (size_t)n_tok * rb);
    if (dk)
        cudaMemset(dk, 0, (size_t)n_tok * rb);
    uint8_t *rows[9];
    for (int t = 0; t < n_tok; t++)
        rows[t] = dk ? dk + (size_t)t * rb : NULL;
    fg_cuda_kv_write_params p = {.format = format, .src = dput(&bs, src, sizeof(float) * n_tok * (L + R)),
                                 .src_stride = L + R, .kv_lora = L, .n_rope = R, .latent_bytes = lat,
                                 .rows = dput(&br, rows, sizeof rows), .layer_offset = 0, .n_tok = n_tok};
    const char *v = fg_kv_format_name((fg_kv_format)format);
    if (launched(c, "kv_write", v, fg_cuda_kv_write(&p, &c->launch)) && dget(&bk, got, (size_t)n_tok * rb)) {
        size_t diff = 0;
        for (size_t i = 0; i < (size_t)n_tok * rb; i++)
            diff += ref[i] != got[i];
        const int g = guards_ok(&bk);
        report(c, "kv_write", v, diff == 0 && g, "bytes differing from fg_kv_quantize: %.0f (guards %.0f)",
               (double)diff, (double)g);
    }
    dfree(&bs), dfree(&bk), dfree(&br);
    free(src), free(ref), free(got);
}

static void check_mla_attn(ctx *c, int format, int n_kv)
{
    const int L = 512, R = 64, H = 16, n_tok = 3, n_layer = 2, layer = 1;
    const size_t lat = fg_kv_bytes((fg_kv_format)format, L), rb = (lat + fg_kv_bytes((fg_kv_format)format, R) + 3) & ~(size_t)3;
    const size_t page_bytes = (size_t)FG_KV_PAGE_TOKENS * n_layer * rb;
    const int n_pages = (n_kv + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    uint8_t *pages = calloc((size_t)n_pages, page_bytes);
    float *row = malloc(sizeof(float) * (L + R));
    for (int j = 0; j < n_kv; j++) {
        fill(c, row, (size_t)(L + R), 1.0f);
        uint8_t *dst = pages + (size_t)(j / FG_KV_PAGE_TOKENS) * page_bytes +
                       ((size_t)layer * FG_KV_PAGE_TOKENS + j % FG_KV_PAGE_TOKENS) * rb;
        fg_kv_quantize((fg_kv_format)format, row, L, dst);
        fg_kv_quantize((fg_kv_format)format, row + L, R, dst + lat);
    }
    /* Pages in reverse order in memory, to check the page table is followed. */
    const uint8_t *host_tab[64];
    for (int pi = 0; pi < n_pages; pi++)
        host_tab[pi] = pages + (size_t)pi * page_bytes;
    float *q_lat = malloc(sizeof(float) * n_tok * H * L), *q_rope = malloc(sizeof(float) * n_tok * H * R);
    fill(c, q_lat, (size_t)n_tok * H * L, 1.0f);
    fill(c, q_rope, (size_t)n_tok * H * R, 1.0f);
    int n_kvs[3] = {1, n_kv / 2 + 1, n_kv};
    float *ref = malloc(sizeof(float) * n_tok * H * L), *got = malloc(sizeof(float) * n_tok * H * L);
    fg_mla_attn_params cp = {.n_head = H, .kv_lora = L, .n_rope = R, .scale = 0.0723f, .format = (fg_kv_format)format,
                             .pages = host_tab, .layer_offset = (size_t)layer * FG_KV_PAGE_TOKENS * rb, .row_bytes = rb};
    cp.n_kv = n_kv;
    float *scratch = malloc(sizeof(float) * (fg_mla_attn_scratch_floats(&cp) + 16));
    for (int t = 0; t < n_tok; t++) {
        cp.n_kv = n_kvs[t];
        fg_mla_attn(&cp, q_lat + (size_t)t * H * L, q_rope + (size_t)t * H * R, ref + (size_t)t * H * L, scratch);
    }
    dbuf bp, bt, b0, bn, bq, br, bo;
    uint8_t *dpages = dnew(&bp, (size_t)n_pages * page_bytes);
    const uint8_t *dev_tab[64];
    for (int pi = 0; pi < n_pages; pi++) { /* device page i holds host page n_pages - 1 - i */
        dev_tab[n_pages - 1 - pi] = dpages ? dpages + (size_t)pi * page_bytes : NULL;
        if (dpages)
            cudaMemcpy(dpages + (size_t)pi * page_bytes, host_tab[n_pages - 1 - pi], page_bytes, cudaMemcpyHostToDevice);
    }
    int page0[3] = {0, 0, 0};
    fg_cuda_mla_attn_params p = {.n_tok = n_tok, .n_head = H, .kv_lora = L, .n_rope = R, .scale = cp.scale,
                                 .format = format, .latent_bytes = lat, .row_bytes = rb, .layer_offset = cp.layer_offset,
                                 .pages = dput(&bt, dev_tab, sizeof(void *) * n_pages),
                                 .tok_page0 = dput(&b0, page0, sizeof page0), .tok_n_kv = dput(&bn, n_kvs, sizeof n_kvs),
                                 .q_lat = dput(&bq, q_lat, sizeof(float) * n_tok * H * L),
                                 .q_rope = dput(&br, q_rope, sizeof(float) * n_tok * H * R),
                                 .rope_tok_stride = (int64_t)H * R, .rope_head_stride = R,
                                 .out = dnew(&bo, sizeof(float) * n_tok * H * L)};
    char v[64];
    snprintf(v, sizeof v, "%s n_kv 1,%d,%d", fg_kv_format_name((fg_kv_format)format), n_kv / 2 + 1, n_kv);
    if (launched(c, "mla_attn", v, fg_cuda_mla_attn(&p, &c->launch)) && dget(&bo, got, sizeof(float) * n_tok * H * L))
        compare(c, "mla_attn", v, ref, got, (size_t)n_tok * H * L, 1e-8, guards_ok(&bo));
    dfree(&bp), dfree(&bt), dfree(&b0), dfree(&bn), dfree(&bq), dfree(&br), dfree(&bo);
    free(pages), free(row), free(q_lat), free(q_rope), free(ref), free(got), free(scratch);
}

static void check_moe_route(ctx *c, int gating, int n_group, int n_group_used, int with_bias)
{
    const int E = 256, K = 8, n_tok = 33;
    float *lg = malloc(sizeof(float) * n_tok * E), *bias = malloc(sizeof(float) * E);
    fill(c, lg, (size_t)n_tok * E, 4.0f);
    fill(c, bias, (size_t)E, 0.1f);
    fg_moe_route_params rp = {.n_expert = E, .n_used = K, .gating = (fg_gating)gating, .bias = with_bias ? bias : NULL,
                              .n_group = n_group, .n_group_used = n_group_used, .norm = true, .scale = 2.5f};
    float *scratch = malloc(sizeof(float) * fg_moe_route_scratch_floats(&rp));
    int ref_ids[33 * 8], got_ids[33 * 8];
    float ref_w[33 * 8], got_w[33 * 8];
    for (int t = 0; t < n_tok; t++)
        fg_moe_route(&rp, lg + (size_t)t * E, ref_ids + t * K, ref_w + t * K, scratch);
    dbuf bl, bb, bi, bw;
    fg_cuda_moe_route_params p = {.logits = dput(&bl, lg, sizeof(float) * n_tok * E),
                                  .bias = with_bias ? dput(&bb, bias, sizeof(float) * E) : NULL, .n_tok = n_tok,
                                  .n_expert = E, .n_used = K, .gating = gating, .n_group = n_group,
                                  .n_group_used = n_group_used, .norm = 1, .scale = 2.5f,
                                  .ids = dnew(&bi, sizeof ref_ids), .weights = dnew(&bw, sizeof ref_w)};
    if (!with_bias)
        bb.base = NULL;
    char v[64];
    snprintf(v, sizeof v, "%s groups %d/%d%s", gating == FG_CUDA_GATING_SIGMOID ? "sigmoid" : "softmax", n_group_used,
             n_group, with_bias ? " bias" : "");
    if (launched(c, "moe_route", v, fg_cuda_moe_route(&p, &c->launch)) && dget(&bi, got_ids, sizeof got_ids) &&
        dget(&bw, got_w, sizeof got_w)) {
        int mism = 0;
        for (int i = 0; i < n_tok * K; i++)
            mism += ref_ids[i] != got_ids[i];
        report(c, "moe_route", v, mism == 0 && guards_ok(&bi), "expert ids differing: %.0f of %.0f", mism,
               (double)(n_tok * K));
        if (mism == 0)
            compare(c, "moe_route", "weights", ref_w, got_w, (size_t)n_tok * K, 1e-10, guards_ok(&bw));
    }
    dfree(&bl), dfree(&bb), dfree(&bi), dfree(&bw);
    free(lg), free(bias), free(scratch);
}

/* Group + grouped expert products (gate, up, silu, down) + combine, against
 * the CPU's per-expert products and weighted sums. */
static void check_moe_experts(ctx *c, int wtype)
{
    const int E = 16, K = 4, n_tok = 11, d = 256, F = 128;
    size_t mb_g, mb_u, mb_d;
    uint8_t *wg = make_weights(c, wtype, d, F, E, &mb_g), *wu = make_weights(c, wtype, d, F, E, &mb_u);
    uint8_t *wd = make_weights(c, wtype, F, d, E, &mb_d);
    float *x = malloc(sizeof(float) * n_tok * d), *res = malloc(sizeof(float) * n_tok * d);
    float *ref = malloc(sizeof(float) * n_tok * d), *got = malloc(sizeof(float) * n_tok * d);
    fill(c, x, (size_t)n_tok * d, 1.0f);
    fill(c, res, (size_t)n_tok * d, 1.0f);
    int ids[11 * 4];
    float w[11 * 4];
    for (int t = 0; t < n_tok; t++)
        for (int j = 0; j < K; j++) {
            ids[t * K + j] = (t * 7 + j * 5) % E; /* distinct per token; experts 3 and others get several */
            w[t * K + j] = 0.25f + 0.1f * frand(c);
        }
    memcpy(ref, res, sizeof(float) * n_tok * d);
    void *scratch = malloc(fg_matmul_scratch_bytes(wtype, d, 1) + fg_matmul_scratch_bytes(wtype, F, 1) + 128);
    void *al = (void *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float g[128], u[128], y[256];
    for (int t = 0; t < n_tok; t++)
        for (int j = 0; j < K; j++) {
            const int e = ids[t * K + j];
            fg_matmul(c->pool, FG_ISA_SCALAR, wtype, wg + (size_t)e * mb_g, d, F, x + (size_t)t * d, 1, g, al);
            fg_matmul(c->pool, FG_ISA_SCALAR, wtype, wu + (size_t)e * mb_u, d, F, x + (size_t)t * d, 1, u, al);
            fg_silu_mul(g, u, F);
            fg_matmul(c->pool, FG_ISA_SCALAR, wtype, wd + (size_t)e * mb_d, F, d, g, 1, y, al);
            fg_axpy(ref + (size_t)t * d, w[t * K + j], y, d);
        }
    const int S = n_tok * K;
    dbuf bg, bu, bd, bx, bres, bids, bw, bseg, bst, bsp, bhg, bhu, bout, bq;
    const size_t q8 = fg_cuda_matmul_scratch_bytes(wtype, d, S, 1) + fg_cuda_matmul_scratch_bytes(wtype, F, S, 1);
    void *dq = q8 ? dnew(&bq, q8) : NULL;
    if (!q8)
        bq.base = NULL;
    const void *dg = dput(&bg, wg, mb_g * E), *du = dput(&bu, wu, mb_u * E), *dd = dput(&bd, wd, mb_d * E);
    const float *dx = dput(&bx, x, sizeof(float) * n_tok * d);
    float *dres = dput(&bres, res, sizeof(float) * n_tok * d);
    int *dseg = dnew(&bseg, sizeof(int) * (E + 1)), *dst = dnew(&bst, sizeof(int) * S), *dsp = dnew(&bsp, sizeof(int) * S);
    float *dhg = dnew(&bhg, sizeof(float) * S * F), *dhu = dnew(&bhu, sizeof(float) * S * F);
    float *dout = dnew(&bout, sizeof(float) * S * d);
    fg_cuda_moe_group_params gp = {.ids = dput(&bids, ids, sizeof ids), .n_tok = n_tok, .n_used = K, .n_expert = E,
                                   .seg = dseg, .sorted_tok = dst, .slot_pos = dsp};
    const float *dw = dput(&bw, w, sizeof w);
    fg_cuda_moe_experts_params ge = {.wtype = wtype, .w = dg, .w_mat_bytes = mb_g, .n_in = d, .n_out = F, .n_expert = E,
                                     .seg = dseg, .n_slots = S, .slot_row = dst, .x = dx, .x_stride = d, .n_rows = n_tok,
                                     .y = dhg, .y_stride = F, .q8_scratch = dq};
    fg_cuda_moe_experts_params ue = ge;
    ue.w = du, ue.w_mat_bytes = mb_u, ue.y = dhu;
    fg_cuda_silu_mul_params sm = {.g = dhg, .u = dhu, .stride = F, .n_rows = S, .n = F};
    fg_cuda_moe_experts_params de = {.wtype = wtype, .w = dd, .w_mat_bytes = mb_d, .n_in = F, .n_out = d, .n_expert = E,
                                     .seg = dseg, .n_slots = S, .slot_row = NULL, .x = dhg, .x_stride = F, .n_rows = S,
                                     .y = dout, .y_stride = d, .q8_scratch = dq};
    fg_cuda_moe_combine_params cb = {.x = dres, .y = dout, .weights = dw, .slot_pos = dsp, .n_tok = n_tok, .n_used = K,
                                     .d = d};
    const char *v = wtype_name(wtype);
    if (launched(c, "moe_experts", v, fg_cuda_moe_group(&gp, &c->launch)) &&
        launched(c, "moe_experts", v, fg_cuda_moe_experts(&ge, &c->launch)) &&
        launched(c, "moe_experts", v, fg_cuda_moe_experts(&ue, &c->launch)) &&
        launched(c, "moe_experts", v, fg_cuda_silu_mul(&sm, &c->launch)) &&
        launched(c, "moe_experts", v, fg_cuda_moe_experts(&de, &c->launch)) &&
        launched(c, "moe_experts", v, fg_cuda_moe_combine(&cb, &c->launch)) &&
        dget(&bres, got, sizeof(float) * n_tok * d))
        compare(c, "moe_experts", v, ref, got, (size_t)n_tok * d, 1e-7,
                guards_ok(&bres) && guards_ok(&bhg) && guards_ok(&bout) && guards_ok(&bseg));
    dbuf *all[] = {&bg, &bu, &bd, &bx, &bres, &bids, &bw, &bseg, &bst, &bsp, &bhg, &bhu, &bout, &bq};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dfree(all[i]);
    free(wg), free(wu), free(wd), free(x), free(res), free(ref), free(got), free(scratch);
}

static void check_get_rows(ctx *c, int wtype)
{
    const int n_rows = 300, n = 256, n_tok = 6;
    size_t mb;
    uint8_t *w = make_weights(c, wtype, n, n_rows, 1, &mb);
    int32_t ids[6] = {0, 299, 17, 17, -1, 300}; /* out-of-range ids give zero rows */
    float *ref = calloc((size_t)n_tok * n, sizeof(float)), *got = malloc(sizeof(float) * n_tok * n);
    fg_weight fw = {.data = w, .type = wtype, .n_in = n, .n_out = n_rows, .n_mat = 1,
                    .row_bytes = fg_wtype_row_bytes(wtype, n), .mat_bytes = mb};
    for (int t = 0; t < 4; t++)
        fg_weight_row_f32(&fw, ids[t], ref + (size_t)t * n);
    dbuf bw, bi, bo;
    fg_cuda_get_rows_params p = {.wtype = wtype, .w = dput(&bw, w, mb), .n_rows = n_rows, .n = n,
                                 .ids = dput(&bi, ids, sizeof ids), .out = dnew(&bo, sizeof(float) * n_tok * n),
                                 .n_tok = n_tok};
    const char *v = wtype_name(wtype);
    if (launched(c, "get_rows", v, fg_cuda_get_rows(&p, &c->launch)) && dget(&bo, got, sizeof(float) * n_tok * n)) {
        const int exact = memcmp(ref, got, sizeof(float) * n_tok * n) == 0;
        report(c, "get_rows", v, exact && guards_ok(&bo), "bit-exact with fg_weight_row_f32: %.0f, guards %.0f", exact, guards_ok(&bo));
    }
    dfree(&bw), dfree(&bi), dfree(&bo);
    free(w), free(ref), free(got);
}

static void check_sample(ctx *c)
{
    const int V = 129280, rows = 4;
    float *lg = malloc(sizeof(float) * rows * V);
    fill(c, lg, (size_t)rows * V, 8.0f);
    lg[2 * V + 5] = lg[2 * V + 9] = 50.0f; /* a tie: the lower id wins */
    lg[3 * V + 0] = NAN;                  /* NaN never wins */
    lg[3 * V + 1] = 60.0f;
    fg_cuda_sample_row r[4];
    memset(r, 0, sizeof r);
    for (int i = 0; i < rows; i++)
        r[i].top_p = 1.0f;
    r[1] = (fg_cuda_sample_row){.temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .min_p = 0.0f, .u = 0.37};
    int32_t got[4];
    dbuf bl, br, bo;
    fg_cuda_sample_params p = {.logits = dput(&bl, lg, sizeof(float) * rows * V), .stride = V, .n_rows = rows,
                               .n_vocab = V, .rows = dput(&br, r, sizeof r), .max_top_k = 40,
                               .out = dnew(&bo, sizeof got)};
    if (launched(c, "sample", "greedy and top-k 40", fg_cuda_sample(&p, &c->launch)) && dget(&bo, got, sizeof got)) {
        int ok = guards_ok(&bo);
        for (int i = 0; i < rows; i++)
            if (i != 1)
                ok &= got[i] == fg_argmax(lg + (size_t)i * V, V);
        ok &= got[2] == 5 && got[3] == 1;
        /* top-k: the draw must be among the 40 best logits. */
        int rank = 0;
        if (got[1] >= 0 && got[1] < V)
            for (int i = 0; i < V; i++)
                rank += lg[V + i] > lg[V + got[1]];
        ok &= got[1] >= 0 && got[1] < V && rank < 40;
        report(c, "sample", "greedy and top-k 40", ok, "greedy equal to fg_argmax; top-k draw has rank %.0f (must be < %.0f)", rank, 40);
    }
    dfree(&bl), dfree(&br), dfree(&bo);
    free(lg);
}

/* ---- DeepSeek V4 (deepseek4) ops, against kernels/cpu/ds4_ops.h ---- */

/* CSA pooling: the kernel computes the reference's double softmax with the
 * device's exp (both within an ulp of double); only the final f32 rounding can
 * then differ, by one ulp (2^-23 relative): nmse <= 2^-46 ~ 1.4e-14. */
static void check_ds4_pool_csa(ctx *c, int width)
{
    const int nb = 5, r = FG_DS4_CSA;
    const size_t blk = (size_t)r * 2 * 2 * width;
    float *cur = malloc(sizeof(float) * nb * blk), *prev = malloc(sizeof(float) * nb * blk);
    float *ref = malloc(sizeof(float) * nb * width), *got = malloc(sizeof(float) * nb * width);
    int32_t has_prev[5] = {0, 1, 1, 1, 1}; /* block 0 of a sequence, then later ones */
    fill(c, cur, nb * blk, 4.0f);
    fill(c, prev, nb * blk, 4.0f);
    for (int b = 0; b < nb; b++)
        fg_ds4_pool_csa(r, width, cur + b * blk, has_prev[b] ? prev + b * blk : NULL, ref + (size_t)b * width);
    dbuf bc, bp, bh, bo;
    fg_cuda_ds4_pool_csa_params p = {.row = dnew(&bo, sizeof(float) * nb * width),
                                     .cur = dput(&bc, cur, sizeof(float) * nb * blk),
                                     .prev = dput(&bp, prev, sizeof(float) * nb * blk),
                                     .has_prev = dput(&bh, has_prev, sizeof has_prev), .n_blocks = nb, .r = r,
                                     .width = width};
    char v[40];
    snprintf(v, sizeof v, "csa r4 5x%d", width);
    if (launched(c, "ds4_pool", v, fg_cuda_ds4_pool_csa(&p, &c->launch)) &&
        dget(&bo, got, sizeof(float) * nb * width))
        compare(c, "ds4_pool", v, ref, got, (size_t)nb * width, 1e-13, guards_ok(&bo));
    dfree(&bc), dfree(&bp), dfree(&bh), dfree(&bo);
    free(cur), free(prev), free(ref), free(got);
}

/* HCA online softmax in f32, the same operations in the same order; the
 * device's expf (2 ulp) and contracted multiply-adds differ from glibc's by a
 * few ulp per token; over a 128-token block that compounds to at most ~128 x
 * 4 x 2^-24 ~ 3e-5 relative, nmse <= 1e-9 (random data: far below). Three
 * sequences: 300 tokens from position 0 (two closed blocks and an open one),
 * 50 from 100 on a state carried in (closes one at 127), one token at 383. */
static void check_ds4_hca(ctx *c)
{
    const int D = 512, R = FG_DS4_HCA, ns = 3, ntok = 351;
    const int32_t tok0[3] = {0, 300, 350}, n_tok[3] = {300, 50, 1}, pos0[3] = {0, 100, 383}, row0[3] = {0, 2, 3};
    const int n_rows = 4;
    float *k = malloc(sizeof(float) * ntok * D), *g = malloc(sizeof(float) * ntok * D);
    float *ape = malloc(sizeof(float) * R * D), *pre = malloc(sizeof(float) * 100 * D);
    float *st = calloc((size_t)ns * 3 * D, sizeof(float)), *st_ref = malloc(sizeof(float) * ns * 3 * D);
    float *ref = calloc((size_t)n_rows * D, sizeof(float)), *got = malloc(sizeof(float) * n_rows * D);
    float *st_got = malloc(sizeof(float) * ns * 3 * D);
    fill(c, k, (size_t)ntok * D, 2.0f);
    fill(c, g, (size_t)ntok * D, 4.0f);
    fill(c, ape, (size_t)R * D, 1.0f);
    fill(c, pre, (size_t)100 * D, 2.0f);
    /* sequence 1 arrives with positions 0..99 folded; sequence 2 with 256..382 */
    for (int i = 0; i < 100; i++)
        fg_ds4_hca_fold(st + 3 * D, pre + (size_t)i * D, pre + (size_t)(99 - i) * D, ape + (size_t)i * D, i, D);
    for (int i = 0; i < R - 1; i++)
        fg_ds4_hca_fold(st + 6 * D, pre + (size_t)(i % 100) * D, k + (size_t)i * D, ape + (size_t)i * D, i, D);
    memcpy(st_ref, st, sizeof(float) * ns * 3 * D);
    for (int s = 0; s < ns; s++)
        for (int i = 0; i < n_tok[s]; i++) {
            const int pos = pos0[s] + i, slot = pos % R, t = tok0[s] + i;
            fg_ds4_hca_fold(st_ref + (size_t)s * 3 * D, k + (size_t)t * D, g + (size_t)t * D, ape + (size_t)slot * D,
                            slot, D);
            if (slot == R - 1)
                fg_ds4_hca_row(st_ref + (size_t)s * 3 * D, D, ref + (size_t)(row0[s] + pos / R - pos0[s] / R) * D);
        }
    dbuf bs, br, bk, bg, ba, b0, bn, bp, bw;
    fg_cuda_ds4_hca_params p = {.state = dput(&bs, st, sizeof(float) * ns * 3 * D),
                                .rows = dnew(&br, sizeof(float) * n_rows * D),
                                .k = dput(&bk, k, sizeof(float) * ntok * D), .g = dput(&bg, g, sizeof(float) * ntok * D),
                                .ape = dput(&ba, ape, sizeof(float) * R * D), .tok0 = dput(&b0, tok0, sizeof tok0),
                                .n_tok = dput(&bn, n_tok, sizeof n_tok), .pos0 = dput(&bp, pos0, sizeof pos0),
                                .row0 = dput(&bw, row0, sizeof row0), .n_seq = ns, .ratio = R, .D = D};
    if (launched(c, "ds4_pool", "hca r128 3 seqs", fg_cuda_ds4_hca(&p, &c->launch)) &&
        dget(&br, got, sizeof(float) * n_rows * D) && dget(&bs, st_got, sizeof(float) * ns * 3 * D)) {
        compare(c, "ds4_pool", "hca r128 rows", ref, got, (size_t)n_rows * D, 1e-9, guards_ok(&br));
        compare(c, "ds4_pool", "hca r128 state", st_ref, st_got, (size_t)ns * 3 * D, 1e-9, guards_ok(&bs));
    }
    dfree(&bs), dfree(&br), dfree(&bk), dfree(&bg), dfree(&ba), dfree(&b0), dfree(&bn), dfree(&bp), dfree(&bw);
    free(k), free(g), free(ape), free(pre), free(st), free(st_ref), free(ref), free(got), free(st_got);
}

/* Indexer scores: f32 dots of Di terms summed in another order (a warp tree
 * against the CPU's running sum): each dot within Di x 2^-24 of sum |q k|,
 * about sqrt(Di) times the dot on random data, so ~1e-5 relative at Di = 128
 * (a head whose dot sits that close to 0 may flip its relu, moving the score
 * by the same amount): nmse <= 1e-8. Three tokens of two sequences, rows
 * past a block edge (32) and a token with none. */
static void check_ds4_index_score(ctx *c)
{
    const int Hi = 64, Di = 128, nt = 3, max_rows = 300, n_keys = 600;
    const int32_t key0[3] = {0, 0, 300}, n_rows[3] = {257, 0, 300};
    float *q = malloc(sizeof(float) * nt * Hi * Di), *w = malloc(sizeof(float) * nt * Hi);
    float *keys = malloc(sizeof(float) * n_keys * Di);
    float *ref = calloc((size_t)nt * max_rows, sizeof(float)), *got = malloc(sizeof(float) * nt * max_rows);
    fill(c, q, (size_t)nt * Hi * Di, 1.0f);
    fill(c, w, (size_t)nt * Hi, 0.1f);
    fill(c, keys, (size_t)n_keys * Di, 1.0f);
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < n_rows[t]; r++)
            ref[(size_t)t * max_rows + r] = fg_ds4_index_score(q + (size_t)t * Hi * Di, w + (size_t)t * Hi,
                                                              keys + (size_t)(key0[t] + r) * Di, Hi, Di);
    dbuf bs, bq, bw, bk, b0, bn;
    fg_cuda_ds4_index_score_params p = {.scores = dput(&bs, ref, sizeof(float) * nt * max_rows), /* rows past n: kept */
                                        .q = dput(&bq, q, sizeof(float) * nt * Hi * Di),
                                        .w = dput(&bw, w, sizeof(float) * nt * Hi),
                                        .keys = dput(&bk, keys, sizeof(float) * n_keys * Di),
                                        .key0 = dput(&b0, key0, sizeof key0), .n_rows = dput(&bn, n_rows, sizeof n_rows),
                                        .stride = max_rows, .max_rows = max_rows, .n_tok = nt, .Hi = Hi, .Di = Di};
    if (p.scores)
        cudaMemset(p.scores, 0, sizeof(float) * nt * max_rows);
    if (launched(c, "ds4_index", "scores 64x128, 3 tokens", fg_cuda_ds4_index_score(&p, &c->launch)) &&
        dget(&bs, got, sizeof(float) * nt * max_rows))
        compare(c, "ds4_index", "scores 64x128, 3 tokens", ref, got, (size_t)nt * max_rows, 1e-8, guards_ok(&bs));
    dfree(&bs), dfree(&bq), dfree(&bw), dfree(&bk), dfree(&b0), dfree(&bn);
    free(q), free(w), free(keys), free(ref), free(got);
}

/* Top-k on the same scores for both (no rounding in between): the selected
 * rows must be exactly the CPU's, in its order. Scores on a grid of 1/8 so
 * that ties are frequent; n below, at and far above k. */
static void check_ds4_topk(ctx *c, int k)
{
    const int nt = 4, stride = 3000;
    const int32_t n_rows[4] = {3000, 1, 700, 0};
    float *s = malloc(sizeof(float) * nt * stride);
    int32_t *ref = calloc((size_t)nt * k, sizeof(int32_t)), *got = calloc((size_t)nt * k, sizeof(int32_t));
    int32_t ref_n[4], got_n[4];
    int *tmp = malloc(sizeof(int) * (size_t)k);
    for (size_t i = 0; i < (size_t)nt * stride; i++)
        s[i] = roundf(frand(c) * 64.0f) / 8.0f;
    for (int t = 0; t < nt; t++) {
        ref_n[t] = fg_ds4_top_k(s + (size_t)t * stride, n_rows[t], k, tmp);
        for (int i = 0; i < ref_n[t]; i++)
            ref[(size_t)t * k + i] = tmp[i];
    }
    dbuf bo, bn, bs, br;
    fg_cuda_ds4_topk_params p = {.sel = dput(&bo, got, sizeof(int32_t) * nt * k), .n_sel = dnew(&bn, sizeof got_n),
                                 .scores = dput(&bs, s, sizeof(float) * nt * stride),
                                 .n_rows = dput(&br, n_rows, sizeof n_rows), .stride = stride, .n_tok = nt, .k = k};
    char v[40];
    snprintf(v, sizeof v, "top-%d of 3000/1/700/0", k);
    if (launched(c, "ds4_index", v, fg_cuda_ds4_topk(&p, &c->launch)) && dget(&bo, got, sizeof(int32_t) * nt * k) &&
        dget(&bn, got_n, sizeof got_n)) {
        int bad = -1;
        for (int t = 0; t < nt && bad < 0; t++) {
            if (got_n[t] != ref_n[t])
                bad = t;
            for (int i = 0; i < ref_n[t] && bad < 0; i++)
                if (got[(size_t)t * k + i] != ref[(size_t)t * k + i])
                    bad = t;
        }
        const int guards = guards_ok(&bo) && guards_ok(&bn);
        report(c, "ds4_index", v, bad < 0 && guards,
               bad >= 0 ? "token %.0f: rows differ (count %.0f)"
               : guards ? "rows equal (%.0f tokens, k = %.0f)"
                        : "guard bytes overwritten (%.0f tokens, k = %.0f)",
               bad >= 0 ? bad : nt, bad >= 0 ? got_n[bad] : k);
    }
    dfree(&bo), dfree(&bn), dfree(&bs), dfree(&br);
    free(s), free(ref), free(got), free(tmp);
}

/* Attention with a sink against the CPU's tiles of FG_DS4_ATTN_TILE keys
 * (fg_ds4_attn_tile, fg_ds4_attn_finish), on RMS-normalised-like data
 * (logits O(1)). A logit is an f32 dot of D terms in another order: off by
 * D x 2^-24 x sum |q k| x scale ~ 1e-6 at D = 512; a softmax weight moves by
 * that relative, and the output (a weighted mean of the keys) by about the
 * same, spread over 32-key tiles against the CPU's 64 with their own expf:
 * nmse ~ 1e-11, tolerance 1e-8 (as MLA attention). Tokens: a CSA layer's
 * 128 window rows + 512 selected rows (in the indexer's ascending order), an
 * HCA layer's window + 40 rows, 5 window rows, and none (the sink alone). */
static void check_ds4_attn(ctx *c)
{
    const int H = 16, D = 512, nt = 4, n_keys_pool = 2048, kstride = 640;
    const int32_t n_keys[4] = {640, 168, 5, 0};
    const float scale = 1.0f / sqrtf((float)D);
    float *q = malloc(sizeof(float) * nt * H * D), *keys = malloc(sizeof(float) * n_keys_pool * D);
    float *sinks = malloc(sizeof(float) * H), *ref = malloc(sizeof(float) * nt * H * D);
    float *got = malloc(sizeof(float) * nt * H * D), *gath = malloc(sizeof(float) * FG_DS4_ATTN_TILE * D);
    float *acc = malloc(sizeof(float) * D), lg[FG_DS4_ATTN_TILE];
    int32_t *kidx = calloc((size_t)nt * kstride, sizeof(int32_t));
    fill(c, q, (size_t)nt * H * D, 1.7f);
    fill(c, keys, (size_t)n_keys_pool * D, 1.7f);
    fill(c, sinks, (size_t)H, 2.0f);
    for (int t = 0; t < nt; t++) /* the window (a ring: rows wrap), then compressed rows ascending */
        for (int j = 0; j < n_keys[t]; j++)
            kidx[(size_t)t * kstride + j] = j < 128 ? (int32_t)((t * 300 + 97 + j) % 128) : (int32_t)(128 + 3 * (j - 128) + t);
    for (int t = 0; t < nt; t++)
        for (int h = 0; h < H; h++) {
            float m = -INFINITY, l = 0;
            memset(acc, 0, sizeof(float) * D);
            for (int j0 = 0; j0 < n_keys[t]; j0 += FG_DS4_ATTN_TILE) {
                const int nj = n_keys[t] - j0 < FG_DS4_ATTN_TILE ? n_keys[t] - j0 : FG_DS4_ATTN_TILE;
                for (int j = 0; j < nj; j++)
                    memcpy(gath + (size_t)j * D, keys + (size_t)kidx[(size_t)t * kstride + j0 + j] * D,
                           sizeof(float) * D);
                fg_ds4_attn_tile(q + ((size_t)t * H + h) * D, gath, nj, D, scale, &m, &l, acc, lg);
            }
            fg_ds4_attn_finish(m, l, acc, sinks[h], D, ref + ((size_t)t * H + h) * D);
        }
    dbuf bo, bq, bk, bi, bn, bs;
    fg_cuda_ds4_attn_params p = {.out = dnew(&bo, sizeof(float) * nt * H * D), .q = dput(&bq, q, sizeof(float) * nt * H * D),
                                 .keys = dput(&bk, keys, sizeof(float) * n_keys_pool * D),
                                 .kidx = dput(&bi, kidx, sizeof(int32_t) * nt * kstride),
                                 .n_keys = dput(&bn, n_keys, sizeof n_keys), .sinks = dput(&bs, sinks, sizeof(float) * H),
                                 .kstride = kstride, .n_tok = nt, .H = H, .D = D, .scale = scale};
    if (launched(c, "ds4_attn", "16x512 640/168/5/0 keys", fg_cuda_ds4_attn(&p, &c->launch)) &&
        dget(&bo, got, sizeof(float) * nt * H * D))
        compare(c, "ds4_attn", "16x512 640/168/5/0 keys", ref, got, (size_t)nt * H * D, 1e-8, guards_ok(&bo));
    dfree(&bo), dfree(&bq), dfree(&bk), dfree(&bi), dfree(&bn), dfree(&bs);
    free(q), free(keys), free(sinks), free(ref), free(got), free(gath), free(acc), free(kidx);
}

/* mHC: the weights are the same double operations in the same order, so the
 * f32 weights are equal or one ulp apart (a device exp within an ulp of
 * double moving a rounding): nmse <= 2^-46, tolerance 1e-12. The streams'
 * sums are 4-5 f32 products (contracted to FMAs on the device, not on the
 * CPU): a few ulp of sum |w x|, nmse ~ 1e-13 on random signs, tolerance
 * 1e-10 (as RMSNorm). V4's 20 Sinkhorn iterations; 1 (rows only) too. */
static void check_ds4_hc(ctx *c, int iters)
{
    const int nt = 5, E = 4096, M = FG_DS4_OPS_HC_MIX;
    const float eps = 1e-6f;
    float mix[5 * 24], scale[3], base[24], w_ref[5 * 24], w_got[5 * 24];
    float *x = malloc(sizeof(float) * nt * 4 * E), *o = malloc(sizeof(float) * nt * E);
    float *y_ref = malloc(sizeof(float) * nt * E), *y_got = malloc(sizeof(float) * nt * E);
    float *out_ref = malloc(sizeof(float) * nt * 4 * E), *out_got = malloc(sizeof(float) * nt * 4 * E);
    fill(c, mix, (size_t)nt * M, 3.0f);
    fill(c, base, (size_t)M, 1.0f);
    for (int i = 0; i < 3; i++)
        scale[i] = 1.0f + 0.5f * frand(c);
    fill(c, x, (size_t)nt * 4 * E, 2.0f);
    fill(c, o, (size_t)nt * E, 2.0f);
    for (int t = 0; t < nt; t++) {
        fg_ds4_hc_weights(mix + t * M, scale, base, eps, iters, w_ref + t * M);
        fg_ds4_hc_pre(w_ref + t * M, x + (size_t)t * 4 * E, E, y_ref + (size_t)t * E);
        fg_ds4_hc_post(w_ref + t * M, o + (size_t)t * E, x + (size_t)t * 4 * E, E, out_ref + (size_t)t * 4 * E);
    }
    dbuf bw, by, bm, bx, bs, bb, bo, bout;
    fg_cuda_ds4_hc_pre_params p = {.w = dnew(&bw, sizeof w_got), .y = dnew(&by, sizeof(float) * nt * E),
                                   .mix = dput(&bm, mix, sizeof mix), .x = dput(&bx, x, sizeof(float) * nt * 4 * E),
                                   .scale = dput(&bs, scale, sizeof scale), .base = dput(&bb, base, sizeof base),
                                   .n_tok = nt, .E = E, .iters = iters, .eps = eps};
    char v[40];
    snprintf(v, sizeof v, "pre 5x4x%d, %d iters", E, iters);
    if (launched(c, "ds4_hc", v, fg_cuda_ds4_hc_pre(&p, &c->launch)) && dget(&bw, w_got, sizeof w_got) &&
        dget(&by, y_got, sizeof(float) * nt * E)) {
        compare(c, "ds4_hc", "weights (Sinkhorn)", w_ref, w_got, (size_t)nt * M, 1e-12, guards_ok(&bw));
        compare(c, "ds4_hc", v, y_ref, y_got, (size_t)nt * E, 1e-10, guards_ok(&by));
        /* post from the CPU's weights, so that its check is the sums alone */
        cudaMemcpy(p.w, w_ref, sizeof w_ref, cudaMemcpyHostToDevice);
        fg_cuda_ds4_hc_post_params q = {.out = dnew(&bout, sizeof(float) * nt * 4 * E), .w = p.w,
                                        .o = dput(&bo, o, sizeof(float) * nt * E), .x = p.x, .n_tok = nt, .E = E};
        snprintf(v, sizeof v, "post 5x4x%d", E);
        if (launched(c, "ds4_hc", v, fg_cuda_ds4_hc_post(&q, &c->launch)) &&
            dget(&bout, out_got, sizeof(float) * nt * 4 * E))
            compare(c, "ds4_hc", v, out_ref, out_got, (size_t)nt * 4 * E, 1e-10, guards_ok(&bout));
        dfree(&bo), dfree(&bout);
    }
    dfree(&bw), dfree(&by), dfree(&bm), dfree(&bx), dfree(&bs), dfree(&bb);
    free(x), free(o), free(y_ref), free(y_got), free(out_ref), free(out_got);
}

int fg_cuda_selfcheck_ops(FILE *out, int sm)
{
    ctx c = {.out = out, .launch = {.sm = sm, .stream = NULL}, .rng = 0x9e3779b97f4a7c15ull, .pool = fg_pool_create(0)};
    check_rmsnorm(&c);
    check_rope(&c, 0.0f);
    check_rope(&c, 40.0f);
    /* MXFP4: the products of V4's routed experts (and of any MXFP4 matrix); no embedding lookup */
    const int types[] = {FG_WTYPE_F32, FG_WTYPE_F16, FG_WTYPE_BF16, FG_WTYPE_Q8_0, FG_WTYPE_MXFP4};
    for (int i = 0; i < 5; i++) {
        check_matmul(&c, types[i], 7168, 96, 1, 1);     /* decode: one token */
        check_matmul(&c, types[i], 1024, 200, 13, 1);   /* a partial token tile */
        check_matmul(&c, types[i], 128, 512, 9, 16);    /* per-head absorb: 16 matrices over column blocks */
        check_moe_experts(&c, types[i]);
        if (types[i] != FG_WTYPE_MXFP4)
            check_get_rows(&c, types[i]);
    }
    for (int f = 0; f < FG_KV__COUNT; f++) {
        check_kv_write(&c, f);
        check_mla_attn(&c, f, 200);
    }
    check_mla_attn(&c, FG_KV_FP4, 1000);
    check_moe_route(&c, FG_CUDA_GATING_SIGMOID, 8, 4, 1);  /* DeepSeek-V3 routing */
    check_moe_route(&c, FG_CUDA_GATING_SOFTMAX, 1, 1, 0);
    check_moe_route(&c, FG_CUDA_GATING_SIGMOID, 1, 1, 1);
    check_sample(&c);
    check_ds4_pool_csa(&c, 512); /* the attention compressor (D) */
    check_ds4_pool_csa(&c, 128); /* the indexer's (Di) */
    check_ds4_hca(&c);
    check_ds4_index_score(&c);
    check_ds4_topk(&c, 512); /* V4's top_k */
    check_ds4_topk(&c, 16);
    check_ds4_attn(&c);
    check_ds4_hc(&c, 20);
    check_ds4_hc(&c, 1);
    fg_pool_destroy(c.pool);
    return c.failed;
}

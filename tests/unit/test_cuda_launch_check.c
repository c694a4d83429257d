/* test_cuda_launch_check.c: the host-side checks the CUDA launchers run
 * before every launch (kernels/cuda/launch_check.h), on the CPU, with or
 * without a CUDA toolkit. For each op: a valid description passes on the
 * architectures the kernels are built for; then one field at a time is
 * broken (zero or oversized dimension, short stride, NULL or misaligned
 * pointer, unknown type or format, widths the format cannot store, an
 * unsupported device) and the check must name that class of error. The
 * pointers are never dereferenced: they only carry addresses.
 */
#include <string.h>

#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/matmul.h"
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
#include "tests/unit/fg_test.h"

/* Stand-in device addresses: aligned for every type, plus an odd one. */
static _Alignas(64) unsigned char arena[4096];
#define A(off) ((void *)(arena + (off)))
#define ODD ((void *)(arena + 1))
#define SM 90

static void test_arch_and_names(void)
{
    CHECK(fg_cuda_arch_supported(90));
    CHECK(fg_cuda_arch_supported(100));
    CHECK(!fg_cuda_arch_supported(80));
    CHECK(!fg_cuda_arch_supported(89));
    CHECK(!fg_cuda_arch_supported(120)); /* consumer Blackwell: no sm_120 code in this build */
    CHECK(!fg_cuda_arch_supported(0));
    CHECK(strcmp(fg_cuda_status_name(FG_CUDA_OK), "ok") == 0);
    CHECK(strcmp(fg_cuda_status_name(FG_CUDA_BAD_ARCH), "bad_arch") == 0);
    CHECK(strcmp(fg_cuda_status_name((fg_cuda_status)99), "unknown") == 0);
    CHECK(fg_cuda_aligned(A(64), 64) && !fg_cuda_aligned(ODD, 4) && !fg_cuda_aligned(NULL, 1));
}

static void test_rmsnorm(void)
{
    const fg_cuda_rmsnorm_params ok = {.y = A(0), .x = A(64), .w = A(128), .y_stride = 64, .x_stride = 80,
                                       .n_rows = 3, .n = 64, .eps = 1e-6f};
    fg_cuda_rmsnorm_params p = ok;
    CHECK(fg_cuda_rmsnorm_check(&p, SM) == FG_CUDA_OK);
    CHECK(fg_cuda_rmsnorm_check(&p, 100) == FG_CUDA_OK);
    CHECK(fg_cuda_rmsnorm_check(&p, 86) == FG_CUDA_BAD_ARCH);
    p.w = NULL; /* no weight is allowed */
    CHECK(fg_cuda_rmsnorm_check(&p, SM) == FG_CUDA_OK);
    p = ok, p.n = 0;
    CHECK(fg_cuda_rmsnorm_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.x_stride = 63;
    CHECK(fg_cuda_rmsnorm_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.n_rows = -1;
    CHECK(fg_cuda_rmsnorm_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.x = ODD;
    CHECK(fg_cuda_rmsnorm_check(&p, SM) == FG_CUDA_BAD_POINTER);
    p = ok, p.y = NULL;
    CHECK(fg_cuda_rmsnorm_check(&p, SM) == FG_CUDA_BAD_POINTER);
}

static void test_rope(void)
{
    const fg_cuda_rope_params ok = {.x = A(0), .tok_stride = 4 * 96, .vec_stride = 96, .n_tok = 5, .n_vec = 4,
                                    .n_dims = 64, .pos = A(256), .inv_freq = A(512), .mscale = 1.0f};
    fg_cuda_rope_params p = ok;
    CHECK(fg_cuda_rope_check(&p, SM) == FG_CUDA_OK);
    p.n_dims = 63;
    CHECK(fg_cuda_rope_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.n_dims = FG_CUDA_ROPE_MAX_DIMS + 2;
    CHECK(fg_cuda_rope_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.vec_stride = 32; /* heads would overlap */
    CHECK(fg_cuda_rope_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.tok_stride = 96; /* tokens would overlap the heads */
    CHECK(fg_cuda_rope_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.inv_freq = A(4); /* doubles need 8 */
    CHECK(fg_cuda_rope_check(&p, SM) == FG_CUDA_BAD_POINTER);
    p = ok, p.pos = NULL;
    CHECK(fg_cuda_rope_check(&p, SM) == FG_CUDA_BAD_POINTER);
}

static void test_matmul(void)
{
    const fg_cuda_matmul_params ok = {.wtype = FG_WTYPE_Q8_0, .w = A(2), .w_mat_bytes = 0, .n_in = 64, .n_out = 16,
                                      .n_tok = 9, .n_mat = 1, .x = A(0), .x_stride = 64, .y = A(64), .y_stride = 16,
                                      .q8_scratch = A(128)};
    fg_cuda_matmul_params p = ok;
    CHECK(fg_cuda_matmul_check(&p, SM) == FG_CUDA_OK);
    CHECK(fg_cuda_matmul_scratch_bytes(FG_WTYPE_Q8_0, 64, 9, 1) == 9 * 2 * 34);
    CHECK(fg_cuda_matmul_scratch_bytes(FG_WTYPE_BF16, 64, 9, 1) == 0);
    CHECK(fg_cuda_matmul_scratch_bytes(FG_WTYPE_Q8_0, 48, 9, 1) == 0);
    p.n_in = 48; /* not whole Q8_0 blocks */
    CHECK(fg_cuda_matmul_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.q8_scratch = NULL;
    CHECK(fg_cuda_matmul_check(&p, SM) == FG_CUDA_BAD_POINTER);
    p = ok, p.wtype = FG_WTYPE_BF16, p.n_in = 48, p.q8_scratch = NULL; /* BF16 has no block rule, no scratch */
    CHECK(fg_cuda_matmul_check(&p, SM) == FG_CUDA_OK);
    p.w = ODD;
    CHECK(fg_cuda_matmul_check(&p, SM) == FG_CUDA_BAD_POINTER);
    p = ok, p.wtype = FG_WTYPE_F32, p.w = A(2); /* f32 weights need 4-byte alignment */
    CHECK(fg_cuda_matmul_check(&p, SM) == FG_CUDA_BAD_POINTER);
    p = ok, p.wtype = 2; /* ggml Q4_0: not ours */
    CHECK(fg_cuda_matmul_check(&p, SM) == FG_CUDA_BAD_TYPE);
    /* MXFP4 (V4's experts): 17-byte blocks at any byte, Q8_0 activations in the scratch, whole blocks */
    p = ok, p.wtype = FG_WTYPE_MXFP4, p.w = ODD;
    CHECK(fg_cuda_matmul_check(&p, SM) == FG_CUDA_OK);
    CHECK(fg_cuda_matmul_scratch_bytes(FG_WTYPE_MXFP4, 64, 9, 1) == 9 * 2 * 34);
    p.q8_scratch = NULL;
    CHECK(fg_cuda_matmul_check(&p, SM) == FG_CUDA_BAD_POINTER);
    p = ok, p.wtype = FG_WTYPE_MXFP4, p.n_in = 48;
    CHECK(fg_cuda_matmul_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.x_stride = 32;
    CHECK(fg_cuda_matmul_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.n_tok = 0;
    CHECK(fg_cuda_matmul_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    /* A stack of 4 per-head matrices reading column blocks of wider rows. */
    p = ok, p.n_mat = 4, p.w_mat_bytes = 16 * 68, p.x_mat_stride = 64, p.x_stride = 256, p.y_mat_stride = 16,
    p.y_stride = 64;
    CHECK(fg_cuda_matmul_check(&p, SM) == FG_CUDA_OK);
    p.w_mat_bytes = 16 * 68 - 2; /* matrices would overlap */
    CHECK(fg_cuda_matmul_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.n_mat = 70000;
    CHECK(fg_cuda_matmul_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok;
    CHECK(fg_cuda_matmul_check(&p, 75) == FG_CUDA_BAD_ARCH);
}

static void test_kv_write(void)
{
    const fg_cuda_kv_write_params ok = {.format = FG_KV_FP4, .src = A(0), .src_stride = 576, .kv_lora = 512,
                                        .n_rope = 64, .latent_bytes = 288, .rows = A(64), .layer_offset = 1000,
                                        .n_tok = 3};
    fg_cuda_kv_write_params p = ok;
    CHECK(fg_cuda_kv_write_check(&p, SM) == FG_CUDA_OK);
    p.n_rope = 24; /* FP4 needs multiples of 16 */
    CHECK(fg_cuda_kv_write_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.latent_bytes = 516; /* the INT8 size, not FP4's */
    CHECK(fg_cuda_kv_write_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p.format = FG_KV_INT8; /* now consistent */
    CHECK(fg_cuda_kv_write_check(&p, SM) == FG_CUDA_OK);
    p.format = FG_KV__COUNT;
    CHECK(fg_cuda_kv_write_check(&p, SM) == FG_CUDA_BAD_TYPE);
    p = ok, p.format = -1;
    CHECK(fg_cuda_kv_write_check(&p, SM) == FG_CUDA_BAD_TYPE);
    p = ok, p.rows = A(4);
    CHECK(fg_cuda_kv_write_check(&p, SM) == FG_CUDA_BAD_POINTER);
    p = ok, p.src_stride = 575;
    CHECK(fg_cuda_kv_write_check(&p, SM) == FG_CUDA_BAD_SHAPE);
}

static void test_mla_attn(void)
{
    const fg_cuda_mla_attn_params ok = {.n_tok = 2, .n_head = 16, .kv_lora = 512, .n_rope = 64, .scale = 0.07f,
                                        .format = FG_KV_FP8, .latent_bytes = 516, .row_bytes = 584, .layer_offset = 0,
                                        .pages = A(0), .tok_page0 = A(64), .tok_n_kv = A(128), .q_lat = A(256),
                                        .q_rope = A(512), .rope_tok_stride = 16 * 192, .rope_head_stride = 192,
                                        .out = A(1024)};
    fg_cuda_mla_attn_params p = ok;
    CHECK(fg_cuda_mla_attn_check(&p, SM) == FG_CUDA_OK);
    for (int f = 0; f < FG_KV__COUNT; f++) { /* every format the CPU supports, with its own sizes */
        p = ok;
        p.format = f;
        p.latent_bytes = fg_kv_bytes((fg_kv_format)f, 512);
        p.row_bytes = (p.latent_bytes + fg_kv_bytes((fg_kv_format)f, 64) + 3) & ~(size_t)3;
        CHECK_MSG(fg_cuda_mla_attn_check(&p, SM) == FG_CUDA_OK, "format %d", f);
    }
    p = ok, p.row_bytes = 583; /* shorter than latent + rope */
    CHECK(fg_cuda_mla_attn_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.kv_lora = FG_CUDA_MLA_MAX_LATENT + 16;
    p.latent_bytes = fg_kv_bytes(FG_KV_FP8, p.kv_lora);
    p.row_bytes = p.latent_bytes + 68;
    CHECK(fg_cuda_mla_attn_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.rope_head_stride = 32; /* heads' rope parts would overlap */
    CHECK(fg_cuda_mla_attn_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.scale = 0.0f;
    CHECK(fg_cuda_mla_attn_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.format = 7;
    CHECK(fg_cuda_mla_attn_check(&p, SM) == FG_CUDA_BAD_TYPE);
    p = ok, p.tok_n_kv = NULL;
    CHECK(fg_cuda_mla_attn_check(&p, SM) == FG_CUDA_BAD_POINTER);
    p = ok, p.out = ODD;
    CHECK(fg_cuda_mla_attn_check(&p, SM) == FG_CUDA_BAD_POINTER);
}

static void test_moe(void)
{
    const fg_cuda_moe_route_params ok = {.logits = A(0), .bias = A(64), .n_tok = 4, .n_expert = 64, .n_used = 6,
                                         .gating = FG_CUDA_GATING_SIGMOID, .n_group = 8, .n_group_used = 3,
                                         .norm = 1, .scale = 2.5f, .ids = A(128), .weights = A(256)};
    fg_cuda_moe_route_params p = ok;
    CHECK(fg_cuda_moe_route_check(&p, SM) == FG_CUDA_OK);
    p.n_group = 7; /* does not divide the experts */
    CHECK(fg_cuda_moe_route_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.n_group_used = 0;
    CHECK(fg_cuda_moe_route_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.n_group = 64, p.n_group_used = 2; /* 2 groups of 1 expert cannot give 6 */
    CHECK(fg_cuda_moe_route_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.n_used = 65;
    CHECK(fg_cuda_moe_route_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.n_expert = FG_CUDA_MOE_MAX_EXPERTS + 8, p.n_group = 1;
    CHECK(fg_cuda_moe_route_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.gating = 0;
    CHECK(fg_cuda_moe_route_check(&p, SM) == FG_CUDA_BAD_TYPE);
    p = ok, p.bias = NULL; /* no bias is allowed */
    CHECK(fg_cuda_moe_route_check(&p, SM) == FG_CUDA_OK);
    p.ids = ODD;
    CHECK(fg_cuda_moe_route_check(&p, SM) == FG_CUDA_BAD_POINTER);

    const fg_cuda_moe_group_params g_ok = {.ids = A(0), .n_tok = 4, .n_used = 6, .n_expert = 64, .seg = A(128),
                                           .sorted_tok = A(512), .slot_pos = A(640)};
    fg_cuda_moe_group_params g = g_ok;
    CHECK(fg_cuda_moe_group_check(&g, SM) == FG_CUDA_OK);
    g.n_used = 0;
    CHECK(fg_cuda_moe_group_check(&g, SM) == FG_CUDA_BAD_SHAPE);
    g = g_ok, g.n_tok = 0;
    CHECK(fg_cuda_moe_group_check(&g, SM) == FG_CUDA_BAD_SHAPE);
    g = g_ok, g.seg = NULL;
    CHECK(fg_cuda_moe_group_check(&g, SM) == FG_CUDA_BAD_POINTER);

    const fg_cuda_moe_experts_params e_ok = {.wtype = FG_WTYPE_Q8_0, .w = A(0), .w_mat_bytes = 32 * 68, .n_in = 64,
                                             .n_out = 32, .n_expert = 64, .seg = A(64), .n_slots = 24,
                                             .slot_row = A(128), .x = A(256), .x_stride = 64, .n_rows = 4,
                                             .y = A(512), .y_stride = 32, .q8_scratch = A(1024)};
    fg_cuda_moe_experts_params e = e_ok;
    CHECK(fg_cuda_moe_experts_check(&e, SM) == FG_CUDA_OK);
    e.slot_row = NULL; /* then every sorted slot needs its own input row */
    CHECK(fg_cuda_moe_experts_check(&e, SM) == FG_CUDA_BAD_SHAPE);
    e.n_rows = 24;
    CHECK(fg_cuda_moe_experts_check(&e, SM) == FG_CUDA_OK);
    e = e_ok, e.w_mat_bytes = 32 * 68 - 2;
    CHECK(fg_cuda_moe_experts_check(&e, SM) == FG_CUDA_BAD_SHAPE);
    e = e_ok, e.wtype = 12;
    CHECK(fg_cuda_moe_experts_check(&e, SM) == FG_CUDA_BAD_TYPE);
    e = e_ok, e.q8_scratch = NULL;
    CHECK(fg_cuda_moe_experts_check(&e, SM) == FG_CUDA_BAD_POINTER);
    e = e_ok, e.wtype = FG_WTYPE_MXFP4, e.w_mat_bytes = 32 * 34; /* 2 blocks of 17 bytes a row */
    CHECK(fg_cuda_moe_experts_check(&e, SM) == FG_CUDA_OK);
    e.w_mat_bytes = 32 * 34 - 1;
    CHECK(fg_cuda_moe_experts_check(&e, SM) == FG_CUDA_BAD_SHAPE);
    e = e_ok, e.wtype = FG_WTYPE_MXFP4, e.w_mat_bytes = 32 * 34, e.q8_scratch = NULL;
    CHECK(fg_cuda_moe_experts_check(&e, SM) == FG_CUDA_BAD_POINTER);

    const fg_cuda_moe_combine_params c_ok = {.x = A(0), .y = A(64), .weights = A(128), .slot_pos = A(256),
                                             .n_tok = 4, .n_used = 6, .d = 64};
    fg_cuda_moe_combine_params c = c_ok;
    CHECK(fg_cuda_moe_combine_check(&c, SM) == FG_CUDA_OK);
    c.n_used = FG_CUDA_MOE_MAX_USED + 1;
    CHECK(fg_cuda_moe_combine_check(&c, SM) == FG_CUDA_BAD_SHAPE);
    c = c_ok, c.weights = ODD;
    CHECK(fg_cuda_moe_combine_check(&c, SM) == FG_CUDA_BAD_POINTER);
}

static void test_vecops_and_sample(void)
{
    fg_cuda_silu_mul_params s = {.g = A(0), .u = A(64), .stride = 32, .n_rows = 2, .n = 32};
    CHECK(fg_cuda_silu_mul_check(&s, SM) == FG_CUDA_OK);
    s.stride = 31;
    CHECK(fg_cuda_silu_mul_check(&s, SM) == FG_CUDA_BAD_SHAPE);
    fg_cuda_add_params a = {.x = A(0), .y = A(64), .n = 100};
    CHECK(fg_cuda_add_check(&a, SM) == FG_CUDA_OK);
    a.n = 0;
    CHECK(fg_cuda_add_check(&a, SM) == FG_CUDA_BAD_SHAPE);
    fg_cuda_get_rows_params g = {.wtype = FG_WTYPE_Q8_0, .w = A(0), .n_rows = 1000, .n = 64, .ids = A(64),
                                 .out = A(128), .n_tok = 3};
    CHECK(fg_cuda_get_rows_check(&g, SM) == FG_CUDA_OK);
    g.n = 40;
    CHECK(fg_cuda_get_rows_check(&g, SM) == FG_CUDA_BAD_SHAPE);
    g.wtype = FG_WTYPE_F16;
    CHECK(fg_cuda_get_rows_check(&g, SM) == FG_CUDA_OK);
    g.wtype = 99;
    CHECK(fg_cuda_get_rows_check(&g, SM) == FG_CUDA_BAD_TYPE);
    g.wtype = FG_WTYPE_MXFP4; /* products only: no embedding lookup in MXFP4 */
    CHECK(fg_cuda_get_rows_check(&g, SM) == FG_CUDA_BAD_TYPE);

    const fg_cuda_sample_params ok = {.logits = A(0), .stride = 1000, .n_rows = 4, .n_vocab = 1000, .rows = A(64),
                                      .max_top_k = 40, .out = A(256)};
    fg_cuda_sample_params p = ok;
    CHECK(fg_cuda_sample_check(&p, SM) == FG_CUDA_OK);
    p.max_top_k = FG_CUDA_SAMPLE_MAX_K + 1; /* the host samples those rows itself */
    CHECK(fg_cuda_sample_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.max_top_k = 0; /* all greedy */
    CHECK(fg_cuda_sample_check(&p, SM) == FG_CUDA_OK);
    p = ok, p.stride = 999;
    CHECK(fg_cuda_sample_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.rows = A(4); /* rows hold doubles */
    CHECK(fg_cuda_sample_check(&p, SM) == FG_CUDA_BAD_POINTER);
}

/* DeepSeek V4: compressor pooling. */
static void test_ds4_compress(void)
{
    const fg_cuda_ds4_pool_csa_params ok = {.row = A(0), .cur = A(64), .prev = A(128), .has_prev = A(192),
                                            .n_blocks = 5, .r = 4, .width = 512};
    fg_cuda_ds4_pool_csa_params p = ok;
    CHECK(fg_cuda_ds4_pool_csa_check(&p, SM) == FG_CUDA_OK);
    CHECK(fg_cuda_ds4_pool_csa_check(&p, 80) == FG_CUDA_BAD_ARCH);
    p.prev = NULL, p.has_prev = NULL; /* every block the first of its sequence */
    CHECK(fg_cuda_ds4_pool_csa_check(&p, SM) == FG_CUDA_OK);
    p = ok, p.r = 0;
    CHECK(fg_cuda_ds4_pool_csa_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.r = FG_CUDA_DS4_MAX_RATIO + 1;
    CHECK(fg_cuda_ds4_pool_csa_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.width = FG_CUDA_DS4_MAX_WIDTH + 1;
    CHECK(fg_cuda_ds4_pool_csa_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.n_blocks = 0;
    CHECK(fg_cuda_ds4_pool_csa_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.cur = NULL;
    CHECK(fg_cuda_ds4_pool_csa_check(&p, SM) == FG_CUDA_BAD_POINTER);
    p = ok, p.prev = ODD;
    CHECK(fg_cuda_ds4_pool_csa_check(&p, SM) == FG_CUDA_BAD_POINTER);
    p = ok, p.row = ODD;
    CHECK(fg_cuda_ds4_pool_csa_check(&p, SM) == FG_CUDA_BAD_POINTER);

    const fg_cuda_ds4_hca_params hk = {.state = A(0), .rows = A(64), .k = A(128), .g = A(192), .ape = A(256),
                                       .tok0 = A(320), .n_tok = A(336), .pos0 = A(352), .row0 = A(368),
                                       .n_seq = 3, .ratio = 128, .D = 512};
    fg_cuda_ds4_hca_params h = hk;
    CHECK(fg_cuda_ds4_hca_check(&h, SM) == FG_CUDA_OK);
    CHECK(fg_cuda_ds4_hca_check(&h, 120) == FG_CUDA_BAD_ARCH);
    h.n_seq = 0;
    CHECK(fg_cuda_ds4_hca_check(&h, SM) == FG_CUDA_BAD_SHAPE);
    h = hk, h.n_seq = (1 << 16) + 1;
    CHECK(fg_cuda_ds4_hca_check(&h, SM) == FG_CUDA_BAD_SHAPE);
    h = hk, h.ratio = 129;
    CHECK(fg_cuda_ds4_hca_check(&h, SM) == FG_CUDA_BAD_SHAPE);
    h = hk, h.D = 0;
    CHECK(fg_cuda_ds4_hca_check(&h, SM) == FG_CUDA_BAD_SHAPE);
    h = hk, h.ape = NULL;
    CHECK(fg_cuda_ds4_hca_check(&h, SM) == FG_CUDA_BAD_POINTER);
    h = hk, h.pos0 = ODD;
    CHECK(fg_cuda_ds4_hca_check(&h, SM) == FG_CUDA_BAD_POINTER);
    h = hk, h.state = ODD;
    CHECK(fg_cuda_ds4_hca_check(&h, SM) == FG_CUDA_BAD_POINTER);
}

/* DeepSeek V4: indexer scores and top-k. */
static void test_ds4_index(void)
{
    const fg_cuda_ds4_index_score_params ok = {.scores = A(0), .q = A(64), .w = A(128), .keys = A(192),
                                               .key0 = A(256), .n_rows = A(320), .stride = 300, .max_rows = 300,
                                               .n_tok = 3, .Hi = 64, .Di = 128};
    fg_cuda_ds4_index_score_params p = ok;
    CHECK(fg_cuda_ds4_index_score_check(&p, SM) == FG_CUDA_OK);
    CHECK(fg_cuda_ds4_index_score_check(&p, 86) == FG_CUDA_BAD_ARCH);
    p.Hi = 65; /* the query no longer fits the kernel's shared array */
    CHECK(fg_cuda_ds4_index_score_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.Di = FG_CUDA_DS4_IDX_MAX_DIM + 1, p.Hi = 1;
    CHECK(fg_cuda_ds4_index_score_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.stride = 299;
    CHECK(fg_cuda_ds4_index_score_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.max_rows = (1 << 20) + 1, p.stride = p.max_rows;
    CHECK(fg_cuda_ds4_index_score_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.n_tok = 0;
    CHECK(fg_cuda_ds4_index_score_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.keys = NULL;
    CHECK(fg_cuda_ds4_index_score_check(&p, SM) == FG_CUDA_BAD_POINTER);
    p = ok, p.n_rows = ODD;
    CHECK(fg_cuda_ds4_index_score_check(&p, SM) == FG_CUDA_BAD_POINTER);

    const fg_cuda_ds4_topk_params tk = {.sel = A(0), .n_sel = A(64), .scores = A(128), .n_rows = A(192),
                                        .stride = 3000, .n_tok = 4, .k = 512};
    fg_cuda_ds4_topk_params t = tk;
    CHECK(fg_cuda_ds4_topk_check(&t, SM) == FG_CUDA_OK);
    CHECK(fg_cuda_ds4_topk_check(&t, 0) == FG_CUDA_BAD_ARCH);
    t.k = FG_CUDA_DS4_TOPK_MAX + 1;
    CHECK(fg_cuda_ds4_topk_check(&t, SM) == FG_CUDA_BAD_SHAPE);
    t = tk, t.k = 0;
    CHECK(fg_cuda_ds4_topk_check(&t, SM) == FG_CUDA_BAD_SHAPE);
    t = tk, t.stride = 0;
    CHECK(fg_cuda_ds4_topk_check(&t, SM) == FG_CUDA_BAD_SHAPE);
    t = tk, t.sel = ODD;
    CHECK(fg_cuda_ds4_topk_check(&t, SM) == FG_CUDA_BAD_POINTER);
    t = tk, t.n_sel = NULL;
    CHECK(fg_cuda_ds4_topk_check(&t, SM) == FG_CUDA_BAD_POINTER);
}

/* DeepSeek V4: attention with a sink. */
static void test_ds4_attn(void)
{
    const fg_cuda_ds4_attn_params ok = {.out = A(0), .q = A(64), .keys = A(128), .kidx = A(192), .n_keys = A(256),
                                        .sinks = A(320), .kstride = 640, .n_tok = 4, .H = 64, .D = 512,
                                        .scale = 0.044f};
    fg_cuda_ds4_attn_params p = ok;
    CHECK(fg_cuda_ds4_attn_check(&p, SM) == FG_CUDA_OK);
    CHECK(fg_cuda_ds4_attn_check(&p, 89) == FG_CUDA_BAD_ARCH);
    p.D = FG_CUDA_DS4_ATTN_MAX_DIM + 1; /* more than the per-thread accumulators hold */
    CHECK(fg_cuda_ds4_attn_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.H = 0;
    CHECK(fg_cuda_ds4_attn_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.kstride = 0;
    CHECK(fg_cuda_ds4_attn_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.scale = 0.0f;
    CHECK(fg_cuda_ds4_attn_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.sinks = NULL;
    CHECK(fg_cuda_ds4_attn_check(&p, SM) == FG_CUDA_BAD_POINTER);
    p = ok, p.kidx = ODD;
    CHECK(fg_cuda_ds4_attn_check(&p, SM) == FG_CUDA_BAD_POINTER);
}

/* DeepSeek V4: hyper-connection mixing. */
static void test_ds4_hc(void)
{
    const fg_cuda_ds4_hc_pre_params ok = {.w = A(0), .y = A(128), .mix = A(256), .x = A(512), .scale = A(1024),
                                          .base = A(1088), .n_tok = 5, .E = 4096, .iters = 20, .eps = 1e-6f};
    fg_cuda_ds4_hc_pre_params p = ok;
    CHECK(fg_cuda_ds4_hc_pre_check(&p, SM) == FG_CUDA_OK);
    CHECK(fg_cuda_ds4_hc_pre_check(&p, 75) == FG_CUDA_BAD_ARCH);
    p.iters = 0;
    CHECK(fg_cuda_ds4_hc_pre_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.iters = FG_CUDA_DS4_HC_MAX_ITERS + 1;
    CHECK(fg_cuda_ds4_hc_pre_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.E = 0;
    CHECK(fg_cuda_ds4_hc_pre_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.eps = -1.0f;
    CHECK(fg_cuda_ds4_hc_pre_check(&p, SM) == FG_CUDA_BAD_SHAPE);
    p = ok, p.base = NULL;
    CHECK(fg_cuda_ds4_hc_pre_check(&p, SM) == FG_CUDA_BAD_POINTER);
    p = ok, p.y = ODD;
    CHECK(fg_cuda_ds4_hc_pre_check(&p, SM) == FG_CUDA_BAD_POINTER);

    const fg_cuda_ds4_hc_post_params pk = {.out = A(0), .w = A(128), .o = A(256), .x = A(512), .n_tok = 5, .E = 4096};
    fg_cuda_ds4_hc_post_params q = pk;
    CHECK(fg_cuda_ds4_hc_post_check(&q, SM) == FG_CUDA_OK);
    q.out = A(512); /* in place on the streams it reads */
    CHECK(fg_cuda_ds4_hc_post_check(&q, SM) == FG_CUDA_BAD_POINTER);
    q = pk, q.n_tok = 0;
    CHECK(fg_cuda_ds4_hc_post_check(&q, SM) == FG_CUDA_BAD_SHAPE);
    q = pk, q.w = ODD;
    CHECK(fg_cuda_ds4_hc_post_check(&q, SM) == FG_CUDA_BAD_POINTER);
}

int main(void)
{
    test_arch_and_names();
    test_rmsnorm();
    test_rope();
    test_matmul();
    test_kv_write();
    test_mla_attn();
    test_moe();
    test_vecops_and_sample();
    test_ds4_compress();
    test_ds4_index();
    test_ds4_attn();
    test_ds4_hc();
    if (fg_test_failures)
        fprintf(stderr, "%d check(s) failed\n", fg_test_failures);
    return fg_test_failures ? 1 : 0;
}

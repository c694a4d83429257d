/* launch_check.c: the host-side checks every CUDA launcher runs first (see
 * launch_check.h). Plain C, built in every configuration, so that CI tests
 * them without a GPU or a CUDA toolkit. Limits here are the kernels' own:
 * shared-memory arrays and per-thread accumulators are sized by them.
 */
#include "kernels/cuda/launch_check.h"

#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cuda/kv_write.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/mla_attn.cuh"
#include "kernels/cuda/moe_experts.cuh"
#include "kernels/cuda/moe_route.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/sample.cuh"
#include "kernels/cuda/vecops.cuh"

#define MAX_ROWS (1 << 30)
#define MAX_WIDTH (1 << 20)

const char *fg_cuda_status_name(fg_cuda_status s)
{
    static const char *const names[] = {"ok", "bad_shape", "bad_pointer", "bad_type", "bad_arch", "launch_failed"};
    return (unsigned)s < sizeof names / sizeof *names ? names[s] : "unknown";
}

int fg_cuda_arch_supported(int sm)
{
#ifdef FG_CUDA_HAVE_SM103
    if (sm == 103)
        return 1;
#endif
    return sm == 90 || sm == 100;
}

int fg_cuda_aligned(const void *p, size_t align)
{
    return p != NULL && align != 0 && (uintptr_t)p % align == 0;
}

static int f32_ok(const void *p) { return fg_cuda_aligned(p, sizeof(float)); }

/* Alignment a weight of this type needs (its widest scalar load). 0: unknown type. */
static size_t wtype_align(int wtype)
{
    switch (wtype) {
    case FG_WTYPE_F32:
        return 4;
    case FG_WTYPE_F16:
    case FG_WTYPE_BF16:
    case FG_WTYPE_Q8_0: /* 34-byte blocks: the f16 scale needs 2 */
        return 2;
    case FG_WTYPE_MXFP4: /* 17-byte blocks read bytewise */
        return 1;
    default:
        return 0;
    }
}

/* The types whose products read Q8_0 activations (q8_scratch). */
static int reads_q8(int wtype) { return wtype == FG_WTYPE_Q8_0 || wtype == FG_WTYPE_MXFP4; }

static int width_ok(int wtype, int n)
{
    return n >= 1 && n <= MAX_WIDTH && !(reads_q8(wtype) && n % FG_Q8_0_BLOCK != 0);
}

fg_cuda_status fg_cuda_rmsnorm_check(const fg_cuda_rmsnorm_params *p, int sm)
{
    if (p->n_rows < 1 || p->n_rows > MAX_ROWS || p->n < 1 || p->n > MAX_WIDTH || p->y_stride < p->n ||
        p->x_stride < p->n)
        return FG_CUDA_BAD_SHAPE;
    if (!f32_ok(p->y) || !f32_ok(p->x) || (p->w && !f32_ok(p->w)))
        return FG_CUDA_BAD_POINTER;
    return fg_cuda_arch_supported(sm) ? FG_CUDA_OK : FG_CUDA_BAD_ARCH;
}

fg_cuda_status fg_cuda_rope_check(const fg_cuda_rope_params *p, int sm)
{
    if (p->n_tok < 1 || p->n_tok > MAX_ROWS || p->n_vec < 1 || p->n_vec > 65535 || p->n_dims < 2 ||
        p->n_dims > FG_CUDA_ROPE_MAX_DIMS || p->n_dims % 2 || (p->n_tok > 1 && p->tok_stride < p->n_dims) ||
        (p->n_vec > 1 && p->vec_stride < p->n_dims) ||
        (p->n_tok > 1 && p->n_vec > 1 && p->tok_stride < p->vec_stride * p->n_vec) || !(p->mscale > 0.0f))
        return FG_CUDA_BAD_SHAPE;
    if (!f32_ok(p->x) || !fg_cuda_aligned(p->pos, sizeof(int)) || !fg_cuda_aligned(p->inv_freq, sizeof(double)))
        return FG_CUDA_BAD_POINTER;
    return fg_cuda_arch_supported(sm) ? FG_CUDA_OK : FG_CUDA_BAD_ARCH;
}

size_t fg_cuda_matmul_scratch_bytes(int wtype, int n_in, int n_tok, int n_mat)
{
    if (!reads_q8(wtype) || n_in < 1 || n_in % FG_Q8_0_BLOCK || n_tok < 1 || n_mat < 1)
        return 0;
    return (size_t)n_mat * (size_t)n_tok * (size_t)(n_in / FG_Q8_0_BLOCK) * sizeof(fg_block_q8_0);
}

fg_cuda_status fg_cuda_matmul_check(const fg_cuda_matmul_params *p, int sm)
{
    const size_t align = wtype_align(p->wtype);
    if (!align)
        return FG_CUDA_BAD_TYPE;
    if (!width_ok(p->wtype, p->n_in) || p->n_out < 1 || p->n_out > MAX_ROWS || p->n_tok < 1 ||
        p->n_tok > 65535 * 8 || p->n_mat < 1 || p->n_mat > 65535)
        return FG_CUDA_BAD_SHAPE;
    const size_t row_bytes = fg_wtype_row_bytes(p->wtype, p->n_in);
    if ((p->n_tok > 1 && (p->x_stride < p->n_in || p->y_stride < p->n_out)) ||
        (p->n_mat > 1 && (p->w_mat_bytes < (size_t)p->n_out * row_bytes || p->w_mat_bytes % align ||
                          p->x_mat_stride < 0 || p->y_mat_stride < p->n_out)))
        return FG_CUDA_BAD_SHAPE;
    if (!fg_cuda_aligned(p->w, align) || !f32_ok(p->x) || !f32_ok(p->y))
        return FG_CUDA_BAD_POINTER;
    if (reads_q8(p->wtype) && !fg_cuda_aligned(p->q8_scratch, 4))
        return FG_CUDA_BAD_POINTER;
    return fg_cuda_arch_supported(sm) ? FG_CUDA_OK : FG_CUDA_BAD_ARCH;
}

/* The formats the GPU cache kernels read and write: all of kvquant.h. */
static int kv_widths_ok(int format, int n)
{
    return (unsigned)format < FG_KV__COUNT && fg_kv_bytes((fg_kv_format)format, n) != 0;
}

fg_cuda_status fg_cuda_kv_write_check(const fg_cuda_kv_write_params *p, int sm)
{
    if ((unsigned)p->format >= FG_KV__COUNT)
        return FG_CUDA_BAD_TYPE;
    if (p->n_tok < 1 || p->n_tok > MAX_ROWS || p->kv_lora < 1 || p->kv_lora > 4096 || p->n_rope < 1 ||
        p->n_rope > 4096 || !kv_widths_ok(p->format, p->kv_lora) || !kv_widths_ok(p->format, p->n_rope) ||
        p->latent_bytes != fg_kv_bytes((fg_kv_format)p->format, p->kv_lora) ||
        (p->n_tok > 1 && p->src_stride < p->kv_lora + p->n_rope))
        return FG_CUDA_BAD_SHAPE;
    if (!f32_ok(p->src) || !fg_cuda_aligned(p->rows, sizeof(void *)))
        return FG_CUDA_BAD_POINTER;
    return fg_cuda_arch_supported(sm) ? FG_CUDA_OK : FG_CUDA_BAD_ARCH;
}

fg_cuda_status fg_cuda_mla_attn_check(const fg_cuda_mla_attn_params *p, int sm)
{
    if ((unsigned)p->format >= FG_KV__COUNT)
        return FG_CUDA_BAD_TYPE;
    if (p->n_tok < 1 || p->n_tok > 65535 || p->n_head < 1 || p->n_head > FG_CUDA_MLA_MAX_HEADS || p->kv_lora < 1 ||
        p->kv_lora > FG_CUDA_MLA_MAX_LATENT || p->n_rope < 1 || p->n_rope > FG_CUDA_MLA_MAX_ROPE ||
        !kv_widths_ok(p->format, p->kv_lora) || !kv_widths_ok(p->format, p->n_rope) ||
        p->latent_bytes != fg_kv_bytes((fg_kv_format)p->format, p->kv_lora) ||
        p->row_bytes < p->latent_bytes + fg_kv_bytes((fg_kv_format)p->format, p->n_rope) ||
        !(p->scale > 0.0f) || p->rope_head_stride < (p->n_head > 1 ? p->n_rope : 0) ||
        (p->n_tok > 1 && p->rope_tok_stride < p->rope_head_stride * (p->n_head - 1) + p->n_rope))
        return FG_CUDA_BAD_SHAPE;
    if (!fg_cuda_aligned(p->pages, sizeof(void *)) || !fg_cuda_aligned(p->tok_page0, sizeof(int)) ||
        !fg_cuda_aligned(p->tok_n_kv, sizeof(int)) || !f32_ok(p->q_lat) || !f32_ok(p->q_rope) || !f32_ok(p->out))
        return FG_CUDA_BAD_POINTER;
    return fg_cuda_arch_supported(sm) ? FG_CUDA_OK : FG_CUDA_BAD_ARCH;
}

fg_cuda_status fg_cuda_moe_route_check(const fg_cuda_moe_route_params *p, int sm)
{
    if (p->gating != FG_CUDA_GATING_SOFTMAX && p->gating != FG_CUDA_GATING_SIGMOID)
        return FG_CUDA_BAD_TYPE;
    if (p->n_tok < 1 || p->n_tok > MAX_ROWS || p->n_expert < 1 || p->n_expert > FG_CUDA_MOE_MAX_EXPERTS ||
        p->n_used < 1 || p->n_used > FG_CUDA_MOE_MAX_USED || p->n_used > p->n_expert || p->n_group < 1 || p->n_group > FG_CUDA_MOE_MAX_GROUPS ||
        p->n_expert % p->n_group || p->n_group_used < 1 || p->n_group_used > p->n_group ||
        (p->n_group > 1 && p->n_group_used * (p->n_expert / p->n_group) < p->n_used))
        return FG_CUDA_BAD_SHAPE;
    if (!f32_ok(p->logits) || (p->bias && !f32_ok(p->bias)) || !fg_cuda_aligned(p->ids, sizeof(int)) ||
        !f32_ok(p->weights))
        return FG_CUDA_BAD_POINTER;
    return fg_cuda_arch_supported(sm) ? FG_CUDA_OK : FG_CUDA_BAD_ARCH;
}

fg_cuda_status fg_cuda_moe_group_check(const fg_cuda_moe_group_params *p, int sm)
{
    if (p->n_tok < 1 || p->n_tok > MAX_ROWS / FG_CUDA_MOE_MAX_USED || p->n_used < 1 ||
        p->n_used > FG_CUDA_MOE_MAX_USED || p->n_expert < 1 || p->n_expert > FG_CUDA_MOE_MAX_EXPERTS)
        return FG_CUDA_BAD_SHAPE;
    if (!fg_cuda_aligned(p->ids, sizeof(int)) || !fg_cuda_aligned(p->seg, sizeof(int)) ||
        !fg_cuda_aligned(p->sorted_tok, sizeof(int)) || !fg_cuda_aligned(p->slot_pos, sizeof(int)))
        return FG_CUDA_BAD_POINTER;
    return fg_cuda_arch_supported(sm) ? FG_CUDA_OK : FG_CUDA_BAD_ARCH;
}

fg_cuda_status fg_cuda_moe_experts_check(const fg_cuda_moe_experts_params *p, int sm)
{
    const size_t align = wtype_align(p->wtype);
    if (!align)
        return FG_CUDA_BAD_TYPE;
    if (!width_ok(p->wtype, p->n_in) || p->n_out < 1 || p->n_out > MAX_ROWS || p->n_expert < 1 ||
        p->n_expert > 65535 || p->n_slots < 1 || p->n_slots > MAX_ROWS || p->n_rows < 1 || p->n_rows > MAX_ROWS ||
        p->x_stride < p->n_in || p->y_stride < p->n_out ||
        p->w_mat_bytes < (size_t)p->n_out * fg_wtype_row_bytes(p->wtype, p->n_in) || p->w_mat_bytes % align ||
        (!p->slot_row && p->n_rows < p->n_slots))
        return FG_CUDA_BAD_SHAPE;
    if (!fg_cuda_aligned(p->w, align) || !fg_cuda_aligned(p->seg, sizeof(int)) ||
        (p->slot_row && !fg_cuda_aligned(p->slot_row, sizeof(int))) || !f32_ok(p->x) || !f32_ok(p->y) ||
        (reads_q8(p->wtype) && !fg_cuda_aligned(p->q8_scratch, 4)))
        return FG_CUDA_BAD_POINTER;
    return fg_cuda_arch_supported(sm) ? FG_CUDA_OK : FG_CUDA_BAD_ARCH;
}

fg_cuda_status fg_cuda_moe_combine_check(const fg_cuda_moe_combine_params *p, int sm)
{
    if (p->n_tok < 1 || p->n_tok > MAX_ROWS || p->n_used < 1 || p->n_used > FG_CUDA_MOE_MAX_USED || p->d < 1 ||
        p->d > MAX_WIDTH)
        return FG_CUDA_BAD_SHAPE;
    if (!f32_ok(p->x) || !f32_ok(p->y) || !f32_ok(p->weights) || !fg_cuda_aligned(p->slot_pos, sizeof(int)))
        return FG_CUDA_BAD_POINTER;
    return fg_cuda_arch_supported(sm) ? FG_CUDA_OK : FG_CUDA_BAD_ARCH;
}

fg_cuda_status fg_cuda_silu_mul_check(const fg_cuda_silu_mul_params *p, int sm)
{
    if (p->n_rows < 1 || p->n_rows > MAX_ROWS || p->n < 1 || p->n > MAX_WIDTH || p->stride < p->n)
        return FG_CUDA_BAD_SHAPE;
    if (!f32_ok(p->g) || !f32_ok(p->u))
        return FG_CUDA_BAD_POINTER;
    return fg_cuda_arch_supported(sm) ? FG_CUDA_OK : FG_CUDA_BAD_ARCH;
}

fg_cuda_status fg_cuda_add_check(const fg_cuda_add_params *p, int sm)
{
    if (p->n < 1 || p->n > (int64_t)1 << 40)
        return FG_CUDA_BAD_SHAPE;
    if (!f32_ok(p->x) || !f32_ok(p->y))
        return FG_CUDA_BAD_POINTER;
    return fg_cuda_arch_supported(sm) ? FG_CUDA_OK : FG_CUDA_BAD_ARCH;
}

fg_cuda_status fg_cuda_get_rows_check(const fg_cuda_get_rows_params *p, int sm)
{
    const size_t align = wtype_align(p->wtype);
    if (!align || p->wtype == FG_WTYPE_MXFP4) /* rows are looked up in f32, f16, bf16, q8_0 only */
        return FG_CUDA_BAD_TYPE;
    if (!width_ok(p->wtype, p->n) || p->n_rows < 1 || p->n_tok < 1 || p->n_tok > MAX_ROWS)
        return FG_CUDA_BAD_SHAPE;
    if (!fg_cuda_aligned(p->w, align) || !fg_cuda_aligned(p->ids, sizeof(int32_t)) || !f32_ok(p->out))
        return FG_CUDA_BAD_POINTER;
    return fg_cuda_arch_supported(sm) ? FG_CUDA_OK : FG_CUDA_BAD_ARCH;
}

fg_cuda_status fg_cuda_sample_check(const fg_cuda_sample_params *p, int sm)
{
    if (p->n_rows < 1 || p->n_rows > MAX_ROWS || p->n_vocab < 1 || p->n_vocab > (1 << 24) ||
        (p->n_rows > 1 && p->stride < p->n_vocab) || p->max_top_k < 0 || p->max_top_k > FG_CUDA_SAMPLE_MAX_K)
        return FG_CUDA_BAD_SHAPE;
    if (!f32_ok(p->logits) || !fg_cuda_aligned(p->rows, sizeof(double)) || !fg_cuda_aligned(p->out, sizeof(int32_t)))
        return FG_CUDA_BAD_POINTER;
    return fg_cuda_arch_supported(sm) ? FG_CUDA_OK : FG_CUDA_BAD_ARCH;
}

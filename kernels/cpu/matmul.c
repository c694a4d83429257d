/* matmul.c: dispatch, threading and the scalar reference of matmul.h.
 *
 * A call validates its arguments, picks the ISA, prepares Q8_0 activations
 * for Q8_0 and MXFP4 weights (quantized once, before the row-parallel part, so
 * every thread reads the same finished scratch: fg_pool_run's completion orders
 * the two phases), then splits the output rows over the pool in multiples of MM_ROW_GRAIN (statically for
 * one token, chunk by chunk from a counter for batches). Each thread's kernel
 * loops over the tokens inside its row loop, so a weight row is fetched from
 * memory once per call whatever the batch.
 *
 * The scalar path is the reference that defines the results; it stays plain.
 */
#include "kernels/cpu/matmul.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/quants.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* Output rows per scheduling unit: 16 f32 outputs fill one cache line of y,
 * so two threads never write the same line of a token's output row. */
#define MM_ROW_GRAIN 16
/* ... which is also the packed Q8_0 panel height: a thread always gets whole panels. */
_Static_assert(MM_ROW_GRAIN % 16 == 0, "row chunks must hold whole 16-row panels");
/* Below this many multiply-adds a call runs on the caller alone: waking the
 * pool would cost more than the work. */
#define MM_MIN_PARALLEL_MACS 16384
/* Quantize activations in parallel only when there are this many. */
#define MM_MIN_PARALLEL_QUANT 32768

/* ---- ISA detection ---- */

enum {
    CPU_AVX2 = 1 << 0,    /* AVX2 + FMA + F16C with OS-enabled YMM state */
    CPU_AVX512 = 1 << 1,  /* AVX-512 F/BW/VL/DQ/VNNI with OS-enabled ZMM state */
    CPU_AVX512_BF16 = 1 << 2, /* ... and AVX512-BF16 (vdpbf16ps), unless FG_NO_AVX512_BF16 is set */
    CPU_AMX = 1 << 3,     /* ... and AMX int8 tiles the kernel lets us use, unless FG_NO_AMX is set */
    CPU_DETECTED = 1 << 30,
};

static atomic_int cpu_flags; /* 0 until detected; detection is idempotent */

#if defined(__x86_64__) || defined(__i386__)
static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static int detect_cpu(void)
{
    unsigned a, b, c, d;
    int flags = CPU_DETECTED;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return flags;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx)
        return flags;
    const uint64_t xcr0 = read_xcr0();
    if ((xcr0 & 0x6) != 0x6) /* XMM and YMM state */
        return flags;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return flags;
    const int avx2 = (b >> 5) & 1;
    const int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1,
              avx512vl = (b >> 31) & 1, avx512vnni = (c >> 11) & 1;
    if (avx2 && fma && f16c)
        flags |= CPU_AVX2;
    /* The AVX-512 kernels use F/BW/VL/DQ and VNNI (vpdpbusd), and the F16C/FMA
     * forms of the AVX2 set. Without VNNI we fall back to AVX2 rather than keep
     * a second AVX-512 Q8_0 kernel. AVX512-BF16 is optional: only the BF16
     * product uses it (vdpbf16ps), and widens to f32 where it is missing. */
    if ((flags & CPU_AVX2) && (xcr0 & 0xe0) == 0xe0 && avx512f && avx512dq && avx512bw && avx512vl &&
        avx512vnni)
        flags |= CPU_AVX512;
    /* AVX512-BF16 is leaf 7, subleaf 1, EAX bit 5. FG_NO_AVX512_BF16 (any value
     * but "0" or empty) keeps BF16 weights on the F32-widening path, to compare
     * the two (flashgate-bench-matmul) or reproduce results of CPUs without it. */
    const char *no_bf16 = getenv("FG_NO_AVX512_BF16");
    if ((flags & CPU_AVX512) && __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1) &&
        !(no_bf16 && no_bf16[0] && strcmp(no_bf16, "0") != 0))
        flags |= CPU_AVX512_BF16;
    /* AMX (matmul_amx.c): FG_NO_AMX keeps the AVX-512 kernels, to compare the two */
    const char *no_amx = getenv("FG_NO_AMX");
    if ((flags & CPU_AVX512) && !(no_amx && no_amx[0] && strcmp(no_amx, "0") != 0) &&
        __get_cpuid_count(7, 0, &a, &b, &c, &d) && fg_matmul_amx_permit(d, xcr0))
        flags |= CPU_AMX;
    return flags;
}
#else
static int detect_cpu(void)
{
    return CPU_DETECTED;
}
#endif

static int cpu_get(void)
{
    int f = atomic_load_explicit(&cpu_flags, memory_order_relaxed);
    if (!f) {
        f = detect_cpu();
        atomic_store_explicit(&cpu_flags, f, memory_order_relaxed);
    }
    return f;
}

int fg_isa_supported(fg_isa isa)
{
    switch (isa) {
    case FG_ISA_AUTO:
    case FG_ISA_SCALAR:
        return 1;
    case FG_ISA_AVX2:
        return (cpu_get() & CPU_AVX2) != 0;
    case FG_ISA_AVX512:
        return (cpu_get() & CPU_AVX512) != 0;
    }
    return 0;
}

fg_isa fg_isa_best(void)
{
    const int f = cpu_get();
    if (f & CPU_AVX512)
        return FG_ISA_AVX512;
    if (f & CPU_AVX2)
        return FG_ISA_AVX2;
    return FG_ISA_SCALAR;
}

int fg_matmul_bf16_native(fg_isa isa)
{
    if (isa == FG_ISA_AUTO)
        isa = fg_isa_best();
    return isa == FG_ISA_AVX512 && (cpu_get() & CPU_AVX512_BF16) != 0;
}

int fg_matmul_amx(fg_isa isa)
{
    if (isa == FG_ISA_AUTO)
        isa = fg_isa_best();
    return isa == FG_ISA_AVX512 && (cpu_get() & CPU_AMX) != 0;
}

const char *fg_isa_name(fg_isa isa)
{
    switch (isa) {
    case FG_ISA_AUTO:
        return "auto";
    case FG_ISA_SCALAR:
        return "scalar";
    case FG_ISA_AVX2:
        return "avx2";
    case FG_ISA_AVX512:
        return "avx512";
    }
    return "unknown";
}

/* ---- sizes ---- */

size_t fg_wtype_row_bytes(int wtype, int64_t n_in)
{
    if (n_in <= 0)
        return 0;
    switch (wtype) {
    case FG_WTYPE_F32:
        return (size_t)n_in * 4;
    case FG_WTYPE_F16:
    case FG_WTYPE_BF16:
        return (size_t)n_in * 2;
    case FG_WTYPE_Q8_0:
    case FG_WTYPE_Q8_0_P16:
        if (n_in % FG_Q8_0_BLOCK)
            return 0;
        return (size_t)(n_in / FG_Q8_0_BLOCK) * sizeof(fg_block_q8_0);
    case FG_WTYPE_MXFP4:
        if (n_in % FG_MXFP4_BLOCK)
            return 0;
        return (size_t)(n_in / FG_MXFP4_BLOCK) * sizeof(fg_block_mxfp4);
    }
    int elems, bytes;
    if (fg_quant_decodes(wtype) && fg_wtype_block(wtype, &elems, &bytes) && n_in % elems == 0)
        return (size_t)(n_in / elems) * (size_t)bytes;
    return 0;
}

static int64_t round_up(int64_t v, int64_t m)
{
    return (v + m - 1) / m * m;
}

int fg_wtype_reads_q8(int wtype)
{
    return wtype == FG_WTYPE_Q8_0 || wtype == FG_WTYPE_Q8_0_P16 || wtype == FG_WTYPE_MXFP4 || fg_quant_decodes(wtype);
}

/* Lays out the fast kernels' activation buffers in scratch (scratch may be
 * NULL to only size them); returns the bytes used. The scalar reference's
 * [n_tok][n_in / 32] fg_block_q8_0 always fits in the same bytes. */
static size_t q8_layout(int64_t n_in, int64_t n_tok, void *scratch, fg_q8_act *xq)
{
    const int64_t nb = n_in / FG_Q8_0_BLOCK;
    const int64_t qs_stride = round_up(n_in, 64);
    const int64_t corr_stride = round_up(n_in / 4, 16);
    const int64_t d_stride = round_up(nb, 16);
    const int64_t n_groups = (n_tok + FG_Q8_PANEL_TOKENS - 1) / FG_Q8_PANEL_TOKENS;
    const size_t qs_bytes = (size_t)(n_tok * qs_stride);
    const size_t corr_bytes = (size_t)(n_tok * corr_stride) * sizeof(int32_t);
    const size_t d_bytes = (size_t)(n_tok * d_stride) * sizeof(float);
    const size_t pq_bytes = (size_t)(n_groups * nb * FG_Q8_PANEL_TOKENS * FG_Q8_0_BLOCK);
    const size_t pd_bytes = (size_t)(n_groups * nb * FG_Q8_PANEL_TOKENS) * sizeof(float);
    const size_t pc_bytes = (size_t)(n_groups * nb * FG_Q8_PANEL_TOKENS) * sizeof(int32_t);
    /* every part starts on a 64-byte boundary: all sizes above are multiples of 32 */
    const size_t off_corr = qs_bytes, off_d = off_corr + corr_bytes, off_pq = off_d + d_bytes;
    const size_t off_pd = (off_pq + pq_bytes + 63) / 64 * 64, off_pc = (off_pd + pd_bytes + 63) / 64 * 64;
    const size_t total = (off_pc + pc_bytes + 63) / 64 * 64;
    if (xq) {
        uint8_t *base = scratch;
        xq->qs = (int8_t *)base;
        xq->corr = (int32_t *)(base + off_corr);
        xq->d = (float *)(base + off_d);
        xq->qs_stride = qs_stride;
        xq->corr_stride = corr_stride;
        xq->d_stride = d_stride;
        xq->pq = (int8_t *)(base + off_pq);
        xq->pd = (float *)(base + off_pd);
        xq->pc = (int32_t *)(base + off_pc);
    }
    return total;
}

/* BF16 activations rounded for vdpbf16ps: [n_tok][round_up(n_in, 32)] BF16,
 * rows of whole 64-byte lines. */
static int64_t bf16_x_stride(int64_t n_in)
{
    return round_up(n_in, 32);
}

size_t fg_matmul_scratch_bytes(int wtype, int64_t n_in, int64_t n_tok)
{
    /* BF16 asks for it whatever the ISA: callers size scratch once, before they know */
    if (wtype == FG_WTYPE_BF16)
        return n_in > 0 && n_tok > 0 ? (size_t)(n_tok * bf16_x_stride(n_in)) * sizeof(uint16_t) : 0;
    if (!fg_wtype_reads_q8(wtype) || n_in <= 0 || n_in % FG_Q8_0_BLOCK || n_tok <= 0)
        return 0;
    return q8_layout(n_in, n_tok, NULL, NULL);
}

/* ---- Q8_0 repacked in 16-row panels (layout in matmul.h) ---- */

#define P16_ROWS 16
#define P16_BLOCK_BYTES (P16_ROWS * FG_Q8_0_BLOCK) /* 512 */

size_t fg_matmul_q8_p16_bytes(int64_t n_in, int64_t n_out)
{
    if (n_in <= 0 || n_out <= 0 || n_in % FG_Q8_0_BLOCK || n_out % P16_ROWS)
        return 0;
    return (size_t)n_out * fg_wtype_row_bytes(FG_WTYPE_Q8_0, n_in);
}

int fg_matmul_pack_q8_p16(const void *w, int64_t n_in, int64_t n_out, void *dst)
{
    if (!fg_matmul_q8_p16_bytes(n_in, n_out) || !w || !dst)
        return -1;
    const int64_t nb = n_in / FG_Q8_0_BLOCK;
    const size_t row_bytes = fg_wtype_row_bytes(FG_WTYPE_Q8_0, n_in);
    const size_t panel_bytes = P16_ROWS * row_bytes;
    for (int64_t p = 0; p < n_out / P16_ROWS; p++) {
        uint8_t *q = (uint8_t *)dst + (size_t)p * panel_bytes;
        uint8_t *sc = q + (size_t)nb * P16_BLOCK_BYTES;
        for (int r = 0; r < P16_ROWS; r++) {
            const fg_block_q8_0 *row = (const fg_block_q8_0 *)((const uint8_t *)w + (size_t)(p * P16_ROWS + r) * row_bytes);
            for (int64_t b = 0; b < nb; b++) {
                memcpy(sc + ((size_t)b * P16_ROWS + r) * 2, &row[b].d, 2);
                for (int k = 0; k < FG_Q8_0_BLOCK; k++)
                    q[(size_t)b * P16_BLOCK_BYTES + (k / 4) * 64 + r * 4 + k % 4] = (uint8_t)row[b].qs[k] ^ 0x80;
            }
        }
    }
    return 0;
}

/* Row o's block b of a packed matrix, unpacked to the Q8_0 block it came from. */
static void p16_block(const fg_matmul_args *a, int64_t o, int64_t b, fg_block_q8_0 *out)
{
    const int64_t nb = a->n_in / FG_Q8_0_BLOCK;
    const uint8_t *q = (const uint8_t *)a->w + (size_t)(o / P16_ROWS) * P16_ROWS * a->row_bytes;
    const int r = (int)(o % P16_ROWS);
    memcpy(&out->d, q + (size_t)nb * P16_BLOCK_BYTES + ((size_t)b * P16_ROWS + r) * 2, 2);
    for (int k = 0; k < FG_Q8_0_BLOCK; k++)
        out->qs[k] = (int8_t)(q[(size_t)b * P16_BLOCK_BYTES + (k / 4) * 64 + r * 4 + k % 4] ^ 0x80);
}

/* ---- scalar reference ---- */

/* The types of quants.h, per matmul.h: each weight row decoded a block at a
 * time, then the per-32 formula, token by token, in block order. */
static void rows_scalar_quant(const fg_matmul_args *a, int64_t o_begin, int64_t o_end)
{
    const int64_t n_in = a->n_in, nb = n_in / FG_Q8_0_BLOCK;
    int elems, bytes;
    fg_wtype_block(a->wtype, &elems, &bytes);
    const int groups = elems / FG_QUANT_GROUP;
    int8_t v[256];
    float s[16], m[16];
    for (int64_t o = o_begin; o < o_end; o++) {
        const uint8_t *wrow = (const uint8_t *)a->w + (size_t)o * a->row_bytes;
        for (int64_t t = 0; t < a->n_tok; t++)
            a->y[t * a->n_out + o] = 0.0f;
        for (int64_t b = 0; b < n_in / elems; b++) {
            (void)fg_quant_decode(a->wtype, wrow + (size_t)b * (size_t)bytes, 1, v, s, m);
            for (int64_t t = 0; t < a->n_tok; t++) {
                const fg_block_q8_0 *xb = (const fg_block_q8_0 *)a->scratch + t * nb + b * groups;
                float sum = a->y[t * a->n_out + o];
                for (int g = 0; g < groups; g++) {
                    int32_t isum[2] = {0, 0}, xsum[2] = {0, 0};
                    for (int i = 0; i < FG_QUANT_GROUP; i++) {
                        isum[i / 16] += (int32_t)v[g * FG_QUANT_GROUP + i] * (int32_t)xb[g].qs[i];
                        xsum[i / 16] += xb[g].qs[i];
                    }
                    const float *sg = s + 2 * g, *mg = m + 2 * g;
                    sum += (sg[0] * (float)isum[0] + sg[1] * (float)isum[1] + mg[0] * (float)xsum[0] +
                            mg[1] * (float)xsum[1]) *
                           fg_f16_to_f32(xb[g].d);
                }
                a->y[t * a->n_out + o] = sum;
            }
        }
    }
}

static void rows_scalar(const fg_matmul_args *a, int64_t o_begin, int64_t o_end)
{
    if (fg_quant_decodes(a->wtype)) {
        rows_scalar_quant(a, o_begin, o_end);
        return;
    }
    const int64_t n_in = a->n_in;
    for (int64_t o = o_begin; o < o_end; o++) {
        const uint8_t *wrow = (const uint8_t *)a->w + (size_t)o * a->row_bytes;
        for (int64_t t = 0; t < a->n_tok; t++) {
            const float *x = a->x + t * n_in;
            float sum = 0.0f;
            switch (a->wtype) {
            case FG_WTYPE_F32: {
                const float *w = (const float *)wrow;
                for (int64_t i = 0; i < n_in; i++)
                    sum += w[i] * x[i];
                break;
            }
            case FG_WTYPE_F16: {
                const uint16_t *w = (const uint16_t *)wrow;
                for (int64_t i = 0; i < n_in; i++)
                    sum += fg_f16_to_f32(w[i]) * x[i];
                break;
            }
            case FG_WTYPE_BF16: {
                const uint16_t *w = (const uint16_t *)wrow;
                for (int64_t i = 0; i < n_in; i++)
                    sum += fg_bf16_to_f32(w[i]) * x[i];
                break;
            }
            case FG_WTYPE_Q8_0:
            case FG_WTYPE_Q8_0_P16: {
                const fg_block_q8_0 *wb = (const fg_block_q8_0 *)wrow;
                const int64_t nb = n_in / FG_Q8_0_BLOCK;
                const fg_block_q8_0 *xb = (const fg_block_q8_0 *)a->scratch + t * nb;
                for (int64_t b = 0; b < nb; b++) {
                    fg_block_q8_0 wp;
                    if (a->wtype == FG_WTYPE_Q8_0_P16)
                        p16_block(a, o, b, &wp);
                    const fg_block_q8_0 *wbb = a->wtype == FG_WTYPE_Q8_0_P16 ? &wp : &wb[b];
                    int32_t isum = 0;
                    for (int j = 0; j < FG_Q8_0_BLOCK; j++)
                        isum += (int32_t)wbb->qs[j] * (int32_t)xb[b].qs[j];
                    sum += (float)isum * (fg_f16_to_f32(wbb->d) * fg_f16_to_f32(xb[b].d));
                }
                break;
            }
            case FG_WTYPE_MXFP4: {
                /* ggml's form: doubled E2M1 values (integers) against the int8 of x, half the scale */
                const fg_block_mxfp4 *wb = (const fg_block_mxfp4 *)wrow;
                const int64_t nb = n_in / FG_MXFP4_BLOCK;
                const fg_block_q8_0 *xb = (const fg_block_q8_0 *)a->scratch + t * nb;
                for (int64_t b = 0; b < nb; b++) {
                    int32_t isum = 0;
                    for (int j = 0; j < FG_MXFP4_BLOCK / 2; j++) {
                        const int32_t lo = (int32_t)(2.0f * fg_e2m1_to_f32(wb[b].qs[j] & 15));
                        const int32_t hi = (int32_t)(2.0f * fg_e2m1_to_f32(wb[b].qs[j] >> 4));
                        isum += lo * (int32_t)xb[b].qs[j] + hi * (int32_t)xb[b].qs[j + FG_MXFP4_BLOCK / 2];
                    }
                    sum += (float)isum * ((0.5f * fg_e8m0_to_f32(wb[b].e)) * fg_f16_to_f32(xb[b].d));
                }
                break;
            }
            }
            a->y[t * a->n_out + o] = sum;
        }
    }
}

static void quant_scalar(const fg_matmul_args *a, int64_t t_begin, int64_t t_end)
{
    const int64_t nb = a->n_in / FG_Q8_0_BLOCK;
    for (int64_t t = t_begin; t < t_end; t++) {
        fg_block_q8_0 *blocks = (fg_block_q8_0 *)a->scratch + t * nb;
        if (!a->src_qs) {
            fg_quantize_row_q8_0(a->x + t * a->n_in, blocks, a->n_in);
            continue;
        }
        /* quantized earlier (fg_matmul_q8_rows): the scales are F16 values, so this is exact */
        const int8_t *qs = a->src_qs + (int64_t)a->src_rows[t] * a->src_qs_stride;
        const float *d = a->src_d + (int64_t)a->src_rows[t] * a->src_d_stride;
        for (int64_t b = 0; b < nb; b++) {
            blocks[b].d = fg_f32_to_f16(d[b]);
            memcpy(blocks[b].qs, qs + b * FG_Q8_0_BLOCK, FG_Q8_0_BLOCK);
        }
    }
}

/* ---- activations quantized once, read by several products (fg_q8_rows) ---- */

/* [n_rows][qs_stride] int8, then [n_rows][d_stride] f32 scales: the fast
 * kernels' own row layout (fg_q8_act's qs and d), so they copy rows whole. */
static size_t q8_rows_layout(int64_t n_in, int64_t n_rows, const void *buf, int8_t **qs, float **d,
                             int64_t *qs_stride, int64_t *d_stride)
{
    *qs_stride = round_up(n_in, 64);
    *d_stride = round_up(n_in / FG_Q8_0_BLOCK, 16);
    const size_t qs_bytes = (size_t)(n_rows * *qs_stride);
    *qs = (int8_t *)buf;
    *d = buf ? (float *)((uint8_t *)buf + qs_bytes) : NULL; /* (NULL: only the size is wanted) */
    return qs_bytes + (size_t)(n_rows * *d_stride) * sizeof(float);
}

size_t fg_q8_rows_bytes(int64_t n_in, int64_t n_rows)
{
    if (n_in <= 0 || n_in % FG_Q8_0_BLOCK || n_rows <= 0)
        return 0;
    int8_t *qs;
    float *d;
    int64_t qst, dst;
    return q8_rows_layout(n_in, n_rows, NULL, &qs, &d, &qst, &dst);
}

typedef struct rows_quant_job {
    fg_isa isa;
    fg_matmul_args a; /* x, n_in, n_tok (= rows) and xq's qs and d pointing into the buffer */
} rows_quant_job;

static void rows_quant(void *ctx, int ith, int nth)
{
    const rows_quant_job *j = ctx;
    const fg_matmul_args *a = &j->a;
    long tb, te;
    fg_pool_split((long)a->n_tok, 1, ith, nth, &tb, &te);
    if (tb >= te)
        return;
    switch (j->isa) {
    case FG_ISA_AVX2:
        fg_matmul_quant_q8_avx2(a, tb, te);
        return;
    case FG_ISA_AVX512:
        fg_matmul_quant_q8_avx512(a, tb, te);
        return;
    default:
        break;
    }
    const int64_t nb = a->n_in / FG_Q8_0_BLOCK;
    for (long t = tb; t < te; t++)
        for (int64_t b = 0; b < nb; b++) {
            fg_block_q8_0 blk;
            fg_quantize_row_q8_0(a->x + t * a->n_in + b * FG_Q8_0_BLOCK, &blk, FG_Q8_0_BLOCK);
            memcpy(a->xq.qs + t * a->xq.qs_stride + b * FG_Q8_0_BLOCK, blk.qs, FG_Q8_0_BLOCK);
            a->xq.d[t * a->xq.d_stride + b] = fg_f16_to_f32(blk.d);
        }
}

int fg_q8_rows_quantize(fg_pool_t *pool, fg_isa isa, const float *x, int64_t n_in, int64_t n_rows, void *buf)
{
    if (isa == FG_ISA_AUTO)
        isa = fg_isa_best();
    if (!fg_isa_supported(isa) || !fg_q8_rows_bytes(n_in, n_rows) || !x || !buf)
        return -1;
    rows_quant_job j;
    memset(&j, 0, sizeof j);
    j.isa = isa;
    j.a.x = x;
    j.a.n_in = n_in;
    j.a.n_tok = n_rows;
    (void)q8_rows_layout(n_in, n_rows, buf, &j.a.xq.qs, &j.a.xq.d, &j.a.xq.qs_stride, &j.a.xq.d_stride);
    if (pool && fg_pool_size(pool) > 1 && n_rows > 1 && n_in * n_rows >= MM_MIN_PARALLEL_QUANT)
        fg_pool_run(pool, rows_quant, &j);
    else
        rows_quant(&j, 0, 1);
    return 0;
}

/* ---- dispatch ---- */

/* One call: one or more products over the same activations (fg_matmul_many),
 * their rows handed out as one pool job. */
typedef struct mm_job {
    fg_matmul_args args[FG_MATMUL_MAX_OPS];
    int n_ops;
    fg_isa isa;
    fg_matmul_args quant;  /* what the quantizer reads: the shared x and xq, the union of the ops' needs */
    fg_matmul_args round;  /* native BF16: x and the rounded xb every BF16 op reads */
    int dynamic;           /* rows are taken chunk by chunk from `next` (batches) */
    long chunk[FG_MATMUL_MAX_OPS];            /* rows per chunk of each op */
    long first[FG_MATMUL_MAX_OPS + 1];        /* the index of each op's first chunk; first[n_ops]: all */
    atomic_long next;      /* the first chunk not yet taken */
} mm_job;

static void run_rows(const mm_job *j, const fg_matmul_args *a, int64_t ob, int64_t oe)
{
    if (ob >= oe)
        return;
    switch (j->isa) {
    case FG_ISA_AVX2:
        fg_matmul_rows_avx2(a, ob, oe);
        break;
    case FG_ISA_AVX512:
        if (a->amx)
            fg_matmul_rows_amx(a, ob, oe);
        else
            fg_matmul_rows_avx512(a, ob, oe);
        break;
    default:
        rows_scalar(a, ob, oe);
        break;
    }
}

static void run_quant(const mm_job *j, int64_t tb, int64_t te)
{
    if (tb >= te)
        return;
    switch (j->isa) {
    case FG_ISA_AVX2:
        fg_matmul_quant_q8_avx2(&j->quant, tb, te);
        break;
    case FG_ISA_AVX512:
        fg_matmul_quant_q8_avx512(&j->quant, tb, te);
        break;
    default:
        quant_scalar(&j->quant, tb, te);
        break;
    }
}

/* Decode (one token) splits the rows statically: each thread then reads its
 * share of W as one sequential stream, which is what reaches the machine's
 * bandwidth. Batches are compute-bound and take chunks of rows from a shared
 * counter instead, so a thread that was descheduled for a while (a shared
 * machine) or started late does fewer chunks rather than holding up the
 * barrier. Chunks are multiples of MM_ROW_GRAIN, so every row is computed by
 * the same kernel either way and the results do not change. */
static void rows_job(void *ctx, int ith, int nth)
{
    mm_job *j = ctx;
    if (!j->dynamic) {
        for (int i = 0; i < j->n_ops; i++) {
            long b, e;
            fg_pool_split((long)j->args[i].n_out, MM_ROW_GRAIN, ith, nth, &b, &e);
            run_rows(j, &j->args[i], b, e);
        }
        return;
    }
    for (;;) {
        const long k = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (k >= j->first[j->n_ops])
            return;
        int i = 0;
        while (k >= j->first[i + 1])
            i++;
        const long n_out = (long)j->args[i].n_out, b = (k - j->first[i]) * j->chunk[i];
        run_rows(j, &j->args[i], b, b + j->chunk[i] < n_out ? b + j->chunk[i] : n_out);
    }
}

static void quant_job(void *ctx, int ith, int nth)
{
    const mm_job *j = ctx;
    long b, e;
    fg_pool_split((long)j->quant.n_tok, 1, ith, nth, &b, &e);
    run_quant(j, b, e);
}

/* Rounds tokens of x to BF16 once for every native BF16 op of the job (j->round). */
static void round_bf16_job(void *ctx, int ith, int nth)
{
    const mm_job *j = ctx;
    long b, e;
    fg_pool_split((long)j->round.n_tok, 1, ith, nth, &b, &e);
    if (b < e)
        fg_matmul_round_bf16_avx512(&j->round, b, e);
}

/* Checks one product as fg_matmul() does; *isa becomes the ISA that runs it.
 * Returns 0, or -1 for an invalid product. */
static int check_op(fg_isa *isa, int wtype, const void *w, int64_t n_in, int64_t n_out, const float *x,
                    int64_t n_tok, const float *y, const void *scratch)
{
    if (*isa == FG_ISA_AUTO)
        *isa = fg_isa_best();
    if (!fg_isa_supported(*isa))
        return -1;
    if (fg_wtype_row_bytes(wtype, n_in) == 0 || n_out < 0 || n_tok < 0)
        return -1;
    if (wtype == FG_WTYPE_Q8_0_P16) {
        if (n_out % P16_ROWS)
            return -1;
        /* only AVX-512 has a kernel for the packed layout; the others read it through the reference */
        if (*isa != FG_ISA_AVX512)
            *isa = FG_ISA_SCALAR;
    }
    if (n_out == 0 || n_tok == 0)
        return 0;
    if (!w || !x || !y || (fg_matmul_scratch_bytes(wtype, n_in, n_tok) > 0 && !scratch))
        return -1;
    return 0;
}

/* Runs the checked products ops[0 .. n_ops) (none empty), all on one ISA.
 * src: NULL, or the activations quantized earlier (its src_* fields), x then NULL. */
static void run_ops(fg_pool_t *pool, fg_isa isa, const fg_matmul_op *ops, int n_ops, int64_t n_in, const float *x,
                    int64_t n_tok, void *scratch, const fg_matmul_args *src)
{
    mm_job j;
    memset(&j, 0, sizeof j);
    j.isa = isa;
    j.n_ops = n_ops;
    int64_t macs = 0, any_q8 = 0, any_bf16 = 0;
    for (int i = 0; i < n_ops; i++) {
        fg_matmul_args *a = &j.args[i];
        a->wtype = ops[i].wtype;
        a->w = ops[i].w;
        a->row_bytes = fg_wtype_row_bytes(ops[i].wtype, n_in);
        a->n_in = n_in;
        a->n_out = ops[i].n_out;
        a->n_tok = n_tok;
        a->x = x;
        a->y = ops[i].y;
        a->scratch = scratch;
        macs += n_in * ops[i].n_out * n_tok;
        if (fg_wtype_reads_q8(a->wtype)) {
            any_q8 = 1;
            q8_layout(n_in, n_tok, scratch, &a->xq);
            if (isa == FG_ISA_AVX512)
                fg_matmul_q8_needs_avx512(a->wtype, n_tok, &a->q8_corr, &a->q8_panels, &a->q8_pad);
            j.quant.q8_corr |= a->q8_corr;
            j.quant.q8_panels |= a->q8_panels;
            j.quant.q8_pad |= a->q8_pad;
        }
        a->amx = fg_matmul_amx(isa) && fg_matmul_amx_wants(a->wtype, n_tok);
        if (a->wtype == FG_WTYPE_BF16 && fg_matmul_bf16_native(isa)) {
            any_bf16 = 1;
            a->bf16_native = 1;
            a->xb = scratch;
            a->xb_stride = bf16_x_stride(n_in);
        }
    }

    const int parallel = pool && fg_pool_size(pool) > 1 && macs >= MM_MIN_PARALLEL_MACS;
    if (any_bf16) {
        /* x rounded once for all BF16 ops, before the rows, as Q8_0 activations are quantized */
        j.round.n_in = n_in;
        j.round.n_tok = n_tok;
        j.round.x = x;
        j.round.bf16_native = 1;
        j.round.xb = scratch;
        j.round.xb_stride = bf16_x_stride(n_in);
        if (parallel && n_tok > 1 && n_in * n_tok >= MM_MIN_PARALLEL_QUANT)
            fg_pool_run(pool, round_bf16_job, &j);
        else
            fg_matmul_round_bf16_avx512(&j.round, 0, n_tok);
    }
    if (any_q8) {
        j.quant.n_in = n_in;
        j.quant.n_tok = n_tok;
        j.quant.x = x;
        j.quant.scratch = scratch;
        if (src) {
            j.quant.src_qs = src->src_qs;
            j.quant.src_d = src->src_d;
            j.quant.src_qs_stride = src->src_qs_stride;
            j.quant.src_d_stride = src->src_d_stride;
            j.quant.src_rows = src->src_rows;
        }
        q8_layout(n_in, n_tok, scratch, &j.quant.xq);
        if (parallel && n_tok > 1 && n_in * n_tok >= MM_MIN_PARALLEL_QUANT)
            fg_pool_run(pool, quant_job, &j);
        else
            run_quant(&j, 0, n_tok);
    }
    if (!parallel) {
        for (int i = 0; i < n_ops; i++)
            run_rows(&j, &j.args[i], 0, j.args[i].n_out);
        return;
    }
    if (n_tok > 1) {
        j.dynamic = 1;
        for (int i = 0; i < n_ops; i++) {
            /* about 8 chunks per thread: enough to even out, few enough atomics */
            const long n_out = (long)ops[i].n_out, per = n_out / (8L * fg_pool_size(pool));
            j.chunk[i] = per < MM_ROW_GRAIN ? MM_ROW_GRAIN : per / MM_ROW_GRAIN * MM_ROW_GRAIN;
            j.first[i + 1] = j.first[i] + (n_out + j.chunk[i] - 1) / j.chunk[i];
        }
        atomic_init(&j.next, 0); /* published to the workers by fg_pool_run */
    }
    fg_pool_run(pool, rows_job, &j);
}

/* fg_matmul_many, or with src set fg_matmul_q8_rows (x is then a non-NULL stand-in for the checks). */
static int many(fg_pool_t *pool, fg_isa isa, const fg_matmul_op *ops, int n_ops, int64_t n_in, const float *x,
                int64_t n_tok, void *scratch, const fg_matmul_args *src)
{
    if (n_ops < 1 || n_ops > FG_MATMUL_MAX_OPS || !ops)
        return -1;
    fg_isa op_isa[FG_MATMUL_MAX_OPS];
    fg_matmul_op live[FG_MATMUL_MAX_OPS];
    int n_live = 0, same_isa = 1, has_q8 = 0, has_bf16 = 0;
    for (int i = 0; i < n_ops; i++) {
        op_isa[i] = isa;
        if (check_op(&op_isa[i], ops[i].wtype, ops[i].w, n_in, ops[i].n_out, x, n_tok, ops[i].y, scratch) != 0)
            return -1;
        if (ops[i].n_out == 0 || n_tok == 0)
            continue;
        op_isa[n_live] = op_isa[i];
        live[n_live++] = ops[i];
        same_isa &= op_isa[n_live - 1] == op_isa[0];
        has_q8 |= fg_wtype_reads_q8(ops[i].wtype);
        has_bf16 |= ops[i].wtype == FG_WTYPE_BF16;
    }
    if (n_live == 0)
        return 0;
    /* Q8_0 activations (of Q8_0 and MXFP4 ops) and BF16-rounded ones both live at
     * the start of scratch: a call that mixes the two kinds runs its ops one by one */
    if (same_isa && !(has_q8 && has_bf16)) {
        run_ops(pool, op_isa[0], live, n_live, n_in, x, n_tok, scratch, src);
        return 0;
    }
    /* packed weights off AVX-512 run on the reference: each op on its own, as fg_matmul would
     * (and so do mixed Q8_0 and BF16 ops, above) */
    for (int i = 0; i < n_live; i++)
        run_ops(pool, op_isa[i], &live[i], 1, n_in, x, n_tok, scratch, src);
    return 0;
}

int fg_matmul_many(fg_pool_t *pool, fg_isa isa, const fg_matmul_op *ops, int n_ops, int64_t n_in, const float *x,
                   int64_t n_tok, void *scratch)
{
    return many(pool, isa, ops, n_ops, n_in, x, n_tok, scratch, NULL);
}

int fg_matmul_q8_rows(fg_pool_t *pool, fg_isa isa, const fg_matmul_op *ops, int n_ops, int64_t n_in,
                      const void *rows_buf, int64_t n_buf_rows, const int *rows, int64_t n_tok, void *scratch)
{
    if (!rows_buf || !fg_q8_rows_bytes(n_in, n_buf_rows) || (n_tok > 0 && !rows) || n_ops < 1 ||
        n_ops > FG_MATMUL_MAX_OPS || !ops)
        return -1;
    for (int i = 0; i < n_ops; i++)
        if (!fg_wtype_reads_q8(ops[i].wtype))
            return -1; /* float weights read x itself */
    for (int64_t t = 0; t < n_tok; t++)
        if (rows[t] < 0 || rows[t] >= n_buf_rows)
            return -1;
    fg_matmul_args src;
    memset(&src, 0, sizeof src);
    int8_t *qs;
    float *d;
    (void)q8_rows_layout(n_in, n_buf_rows, rows_buf, &qs, &d, &src.src_qs_stride, &src.src_d_stride);
    src.src_qs = qs;
    src.src_d = d;
    src.src_rows = rows;
    /* the checks want an x: the buffer stands in (nothing reads it as floats) */
    return many(pool, isa, ops, n_ops, n_in, (const float *)rows_buf, n_tok, scratch, &src);
}

int fg_matmul(fg_pool_t *pool, fg_isa isa, int wtype, const void *w, int64_t n_in, int64_t n_out,
              const float *x, int64_t n_tok, float *y, void *scratch)
{
    const fg_matmul_op op = {.wtype = wtype, .w = w, .n_out = n_out, .y = y};
    return fg_matmul_many(pool, isa, &op, 1, n_in, x, n_tok, scratch);
}

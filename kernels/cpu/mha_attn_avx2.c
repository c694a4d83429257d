/* mha_attn_avx2.c: the AVX2 path of mha_attn.h. Compiled with -mavx2 -mfma
 * -mf16c; mha_attn.c calls in only when the params' isa resolves to AVX2 and
 * the CPU has it.
 *
 * The plan of mha_attn_avx512.c on 8-lane registers (16 of them, so the
 * blocks are smaller), with the same operations per element:
 *   keys:   rows in lanes, 2 key channels x 32 rows per pass over the latent;
 *   values: channels in lanes, 2 rows x 32 value channels per pass;
 *   scores: rows in lanes, up to 4 queries x 16 rows (1-2 queries: x 32) per
 *           pass over the key and rope channels;
 *   o += p_r v_r: up to 4 queries x 16 channels (1-2 queries: x 32, 3: x 24)
 *           per pass over the rows.
 * Each key, value and score is one fused multiply-add chain in channel order
 * from zero, each output element one multiply by the correction then fused
 * multiply-adds over the rows in order, the weights exp_simd.h's exponential
 * (the AVX-512 one's bits), and a page's weight sum adds each lane's 16-row
 * blocks in order, then its lanes in _mm512_reduce_add_ps's tree (hsum8 of
 * the two halves), so a query's bits are those of the AVX-512 kernel built
 * by GCC (test_mha_attn checks each kernel against a double reference, and
 * that a query's bits do not depend on its group).
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/exp_simd.h"
#include "kernels/cpu/mha_attn_isa.h"
#include "kernels/cpu/simd_avx2.h"

#define PAGE FG_MHA_PAGE
#define FULL_UNROLL _Pragma("GCC unroll 4")
#define INLINE static inline __attribute__((always_inline))

_Static_assert(PAGE % 32 == 0, "the kernels take a page's rows 16 or 32 at a time");

enum {
    KC = 2, /* key channels per pass of the key product */
    VR = 2, /* rows per pass of the value product */
    VB = 4, /* 8-channel registers per row in the value product */
};

/* 8 floats from p: all of them, or with `masked` the first n (n <= 0: none). */
INLINE __m256 ld(const float *p, int n, const int masked)
{
    return masked ? _mm256_maskload_ps(p, lanes8(n)) : _mm256_loadu_ps(p);
}

INLINE void st(float *p, int n, const int masked, __m256 x)
{
    if (masked)
        _mm256_maskstore_ps(p, lanes8(n), x);
    else
        _mm256_storeu_ps(p, x);
}

/* Key channels [o0, o0 + KC) of rows [r0, r0 + 32). */
INLINE void keys_block(const float *w, int L, int no, const float *ct, float *k)
{
    __m256 a[KC][4];
    FULL_UNROLL
    for (int c = 0; c < KC; c++)
        FULL_UNROLL
        for (int b = 0; b < 4; b++)
            a[c][b] = _mm256_setzero_ps();
    for (int i = 0; i < L; i++) {
        const float *col = ct + (size_t)i * PAGE;
        const __m256 x0 = _mm256_loadu_ps(col), x1 = _mm256_loadu_ps(col + 8), x2 = _mm256_loadu_ps(col + 16),
                     x3 = _mm256_loadu_ps(col + 24);
        FULL_UNROLL
        for (int c = 0; c < KC; c++) {
            const __m256 wc = _mm256_set1_ps(c < no ? w[(size_t)c * L + i] : 0.0f);
            a[c][0] = _mm256_fmadd_ps(wc, x0, a[c][0]);
            a[c][1] = _mm256_fmadd_ps(wc, x1, a[c][1]);
            a[c][2] = _mm256_fmadd_ps(wc, x2, a[c][2]);
            a[c][3] = _mm256_fmadd_ps(wc, x3, a[c][3]);
        }
    }
    for (int c = 0; c < no; c++)
        FULL_UNROLL
        for (int b = 0; b < 4; b++)
            _mm256_storeu_ps(k + (size_t)c * PAGE + 8 * b, a[c][b]);
}

/* Values [cb, cb + 8 VB) (the first nc of them) of rows [r0, r0 + nr), nr <= VR. */
INLINE void values_block(const float *wv, int W, int L, const float *ct, int r0, int nr, int cb, int nc,
                         const int masked, float *v, int NV)
{
    __m256 a[VR][VB];
    FULL_UNROLL
    for (int rr = 0; rr < VR; rr++)
        FULL_UNROLL
        for (int k = 0; k < VB; k++)
            a[rr][k] = _mm256_setzero_ps();
    for (int i = 0; i < L; i++) {
        const float *wr = wv + (size_t)i * W + cb;
        __m256 x[VB];
        FULL_UNROLL
        for (int k = 0; k < VB; k++)
            x[k] = ld(wr + 8 * k, nc - 8 * k, masked);
        FULL_UNROLL
        for (int rr = 0; rr < VR; rr++) {
            const __m256 c = _mm256_set1_ps(rr < nr ? ct[(size_t)i * PAGE + r0 + rr] : 0.0f);
            FULL_UNROLL
            for (int k = 0; k < VB; k++)
                a[rr][k] = _mm256_fmadd_ps(c, x[k], a[rr][k]);
        }
    }
    for (int rr = 0; rr < nr; rr++)
        FULL_UNROLL
        for (int k = 0; k < VB; k++)
            st(v + (size_t)(r0 + rr) * NV + cb + 8 * k, nc - 8 * k, masked, a[rr][k]);
}

void fg_mha_decompress_avx2(const fg_mha_attn_params *p, const float *ct, int n_rows, int h, float *head_tile)
{
    const int H = p->n_head, L = p->kv_lora, NK = p->n_nope, NV = p->n_v, W = H * NV;

    /* keys: channel j of head h at head_tile + j * PAGE, its weights at wk + (h * NK + j) * L;
     * the 32-row blocks past n_rows are skipped (their rows are unspecified) */
    for (int o0 = 0; o0 < NK; o0 += KC) {
        const int no = NK - o0 < KC ? NK - o0 : KC;
        const float *w = p->wk + ((size_t)h * NK + (size_t)o0) * L;
        for (int r0 = 0; r0 < n_rows; r0 += 32)
            keys_block(w, L, no, ct + r0, head_tile + (size_t)o0 * PAGE + r0);
    }

    /* values: [PAGE][NV], each row sum_l c[l] * wv[l][h * NV ..] */
    float *v = head_tile + fg_mha_head_v_offset(p);
    const float *wv = p->wv + (size_t)h * NV;
    for (int r0 = 0; r0 < n_rows; r0 += VR) {
        const int nr = n_rows - r0 < VR ? n_rows - r0 : VR;
        int cb = 0;
        for (; cb + 8 * VB <= NV; cb += 8 * VB)
            values_block(wv, W, L, ct, r0, nr, cb, 8 * VB, 0, v, NV);
        if (cb < NV)
            values_block(wv, W, L, ct, r0, nr, cb, NV - cb, 1, v, NV);
    }
}

/* Scores of NQ queries for rows [r0, r0 + 8 RB): one chain over the key
 * channels then the rope channels, times the scale, into s[q * PAGE + r]. */
INLINE void scores_block(const fg_mha_attn_params *p, const float *k, const float *kr_t, int r0, const int NQ,
                         const int RB, const float *const *q_nope, const float *const *q_rope, float *s)
{
    const int R = p->n_rope, NK = p->n_nope;
    __m256 a[FG_MHA_GROUP][4];
    FULL_UNROLL
    for (int q = 0; q < NQ; q++)
        FULL_UNROLL
        for (int b = 0; b < RB; b++)
            a[q][b] = _mm256_setzero_ps();
    FULL_UNROLL
    for (int seg = 0; seg < 2; seg++) { /* the key channels, then the rope channels */
        const int n = seg ? R : NK;
        const float *base = (seg ? kr_t : k) + r0;
        for (int j = 0; j < n; j++) {
            const float *kj = base + (size_t)j * PAGE;
            __m256 x[4];
            FULL_UNROLL
            for (int b = 0; b < RB; b++)
                x[b] = _mm256_loadu_ps(kj + 8 * b);
            FULL_UNROLL
            for (int q = 0; q < NQ; q++) {
                const __m256 qv = _mm256_set1_ps(seg ? q_rope[q][j] : q_nope[q][j]);
                FULL_UNROLL
                for (int b = 0; b < RB; b++)
                    a[q][b] = _mm256_fmadd_ps(qv, x[b], a[q][b]);
            }
        }
    }
    const __m256 scale = _mm256_set1_ps(p->scale);
    FULL_UNROLL
    for (int q = 0; q < NQ; q++)
        FULL_UNROLL
        for (int b = 0; b < RB; b++)
            _mm256_storeu_ps(s + q * PAGE + r0 + 8 * b, _mm256_mul_ps(a[q][b], scale));
}

/* o = o * corr + sum_r p_r v_r for channels [cb, cb + 8 OB) (the first nc
 * of them) of NQ queries: the rows all reach first, then each query's own. */
INLINE void values_accumulate(const float *v, int NV, int cb, int nc, const int masked, const int NQ, const int OB,
                              int first, const int *n, int n_all, const float *corr, const float *pw,
                              float *const *o)
{
    __m256 a[FG_MHA_GROUP][4];
    FULL_UNROLL
    for (int q = 0; q < NQ; q++) {
        const __m256 cv = _mm256_set1_ps(corr[q]);
        FULL_UNROLL
        for (int c = 0; c < OB; c++)
            a[q][c] = first ? _mm256_setzero_ps() : _mm256_mul_ps(ld(o[q] + cb + 8 * c, nc - 8 * c, masked), cv);
    }
    int r = 0;
    for (; r < n_all; r++) {
        const float *vr = v + (size_t)r * NV + cb;
        __m256 x[4];
        FULL_UNROLL
        for (int c = 0; c < OB; c++)
            x[c] = ld(vr + 8 * c, nc - 8 * c, masked);
        FULL_UNROLL
        for (int q = 0; q < NQ; q++) {
            const __m256 pr = _mm256_set1_ps(pw[q * PAGE + r]);
            FULL_UNROLL
            for (int c = 0; c < OB; c++)
                a[q][c] = _mm256_fmadd_ps(pr, x[c], a[q][c]);
        }
    }
    FULL_UNROLL
    for (int q = 0; q < NQ; q++) {
        for (int rq = r; rq < n[q]; rq++) { /* this query's rows past the common ones */
            const float *vr = v + (size_t)rq * NV + cb;
            const __m256 pr = _mm256_set1_ps(pw[q * PAGE + rq]);
            FULL_UNROLL
            for (int c = 0; c < OB; c++)
                a[q][c] = _mm256_fmadd_ps(pr, ld(vr + 8 * c, nc - 8 * c, masked), a[q][c]);
        }
        FULL_UNROLL
        for (int c = 0; c < OB; c++)
            st(o[q] + cb + 8 * c, nc - 8 * c, masked, a[q][c]);
    }
}

/* Largest of 8 lanes (exact, so the order does not matter). */
static inline float hmax8(__m256 x)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* The attention of NQ (1 .. FG_MHA_GROUP, a constant in each instance)
 * queries of one head over a page, each key and value vector loaded once for
 * all of them; per query the operations of NQ = 1 (mha_attn_avx512.c's). */
INLINE void attend_group(const fg_mha_attn_params *p, const float *page_tile, const float *head_tile, int page,
                         const int NQ, const int *n, const float *const *q_nope, const float *const *q_rope,
                         float *const *o, float *const *m, float *const *l, float *pw)
{
    const int NV = p->n_v;
    const float *k = head_tile, *kr_t = fg_mha_page_kr(p, page_tile), *v = head_tile + fg_mha_head_v_offset(p);
    const int RB = NQ <= 2 ? 4 : 2; /* row registers per query in the scores */
    const int OB = NQ <= 2 ? 4 : NQ == 3 ? 3 : 2; /* channel registers per query in o */

    int n_all = PAGE, n_max = 0; /* rows every query of the group reaches, rows any reaches */
    FULL_UNROLL
    for (int q = 0; q < NQ; q++) {
        n_all = n[q] < n_all ? n[q] : n_all;
        n_max = n[q] > n_max ? n[q] : n_max;
    }
    for (int r0 = 0; r0 < n_max; r0 += 8 * RB)
        scores_block(p, k, kr_t, r0, NQ, RB, q_nope, q_rope, pw);

    /* per query: the page's maximum, the weights (over the scores in pw), their sum, the rescale */
    const int first = page == 0;
    float corr[FG_MHA_GROUP], psum[FG_MHA_GROUP];
    FULL_UNROLL
    for (int q = 0; q < NQ; q++) {
        float *s = pw + q * PAGE;
        __m256 mxv = _mm256_set1_ps(-INFINITY);
        for (int r = 0; r < n[q]; r += 8)
            mxv = _mm256_blendv_ps(mxv, _mm256_max_ps(mxv, _mm256_loadu_ps(s + r)),
                                   _mm256_castsi256_ps(lanes8(n[q] - r)));
        const float mx = hmax8(mxv);
        const float m_new = first || mx > *m[q] ? mx : *m[q];
        corr[q] = first ? 0.0f : expf(*m[q] - m_new);
        *m[q] = m_new;
        const __m256 mv = _mm256_set1_ps(m_new);
        /* the two halves of the AVX-512 kernel's 16-lane sum; rows past n add zeros */
        __m256 sum_lo = _mm256_setzero_ps(), sum_hi = _mm256_setzero_ps();
        for (int r = 0; r < n[q]; r += 16) {
            const __m256 e0 = _mm256_and_ps(fg_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + r), mv)),
                                            _mm256_castsi256_ps(lanes8(n[q] - r)));
            const __m256 e1 = _mm256_and_ps(fg_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + r + 8), mv)),
                                            _mm256_castsi256_ps(lanes8(n[q] - r - 8)));
            sum_lo = _mm256_add_ps(sum_lo, e0);
            sum_hi = _mm256_add_ps(sum_hi, e1);
            _mm256_storeu_ps(s + r, e0);
            _mm256_storeu_ps(s + r + 8, e1);
        }
        psum[q] = hsum8(_mm256_add_ps(sum_lo, sum_hi));
    }

    int cb = 0;
    for (; cb + 8 * OB <= NV; cb += 8 * OB)
        values_accumulate(v, NV, cb, 8 * OB, 0, NQ, OB, first, n, n_all, corr, pw, o);
    if (cb < NV)
        values_accumulate(v, NV, cb, NV - cb, 1, NQ, OB, first, n, n_all, corr, pw, o);
    FULL_UNROLL
    for (int q = 0; q < NQ; q++)
        *l[q] = first ? psum[q] : *l[q] * corr[q] + psum[q];
}

void fg_mha_attend_avx2(const fg_mha_attn_params *p, const float *page_tile, const float *head_tile, int page, int h,
                        int n_q, const int *n, const float *const *q_nope, const float *const *q_rope,
                        float *const *o, float *const *m, float *const *l, float *scratch)
{
    (void)h; /* the head tile is h's */
    _Static_assert(FG_MHA_GROUP == 4, "one instance per group size below");
    switch (n_q) {
    case 1: attend_group(p, page_tile, head_tile, page, 1, n, q_nope, q_rope, o, m, l, scratch); break;
    case 2: attend_group(p, page_tile, head_tile, page, 2, n, q_nope, q_rope, o, m, l, scratch); break;
    case 3: attend_group(p, page_tile, head_tile, page, 3, n, q_nope, q_rope, o, m, l, scratch); break;
    default: attend_group(p, page_tile, head_tile, page, 4, n, q_nope, q_rope, o, m, l, scratch); break;
    }
}

/* mha_attn_avx512.c: the AVX-512 path of mha_attn.h. Compiled with AVX-512
 * flags; mha_attn.c calls in only after checking the CPU.
 *
 * Decompression of a head is two dense products per page, from the page
 * tile (the latent transposed to [L][PAGE] by fg_mha_load_page), each
 * element one fused multiply-add chain over the latent channels in order (so
 * a row's bits do not depend on which rows share its page or its block of
 * four):
 *   keys:   rows in lanes: each key channel is sum_l w[l] * column l,
 *           4 channels x 64 rows in 16 registers;
 *   values: channels in lanes: each row's values are sum_l c[l] * wv[l][..],
 *           4 rows x 64 channels in 16 registers.
 * Attention keeps rows in lanes: the scores of 64 rows are 4 registers of
 * fused multiply-adds over the key channels (no horizontal sums), the
 * weights exp_simd.h's exponential, and o += p_j v_j with v's rows in order.
 * It takes up to four queries of a head at once: one load of a key or value
 * vector feeds four queries' fused multiply-adds (alone, a query needs more
 * loads than multiply-adds, and loads were the limit: 1.5x faster at 128
 * queries than one query at a time).
 * Same mathematics as the reference, different rounding (the exponential is
 * a polynomial, not expf): tests/unit/test_mha_attn.c holds both to a
 * double-precision reference.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/exp_simd.h"
#include "kernels/cpu/mha_attn_isa.h"

#define PAGE FG_MHA_PAGE
#define FULL_UNROLL _Pragma("GCC unroll 4")

_Static_assert(PAGE == 64, "the kernels keep a page's rows in four 16-lane registers");

static inline __mmask16 lanes(int n)
{
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

void fg_mha_decompress_avx512(const fg_mha_attn_params *p, const float *ct, int n_rows, int h, float *head_tile)
{
    const int H = p->n_head, L = p->kv_lora, NK = p->n_nope, NV = p->n_v, W = H * NV;

    /* keys: channel j of head h at head_tile + j * PAGE, its weights at wk + (h * NK + j) * L */
    for (int o0 = 0; o0 < NK; o0 += 4) {
        const int no = NK - o0 < 4 ? NK - o0 : 4;
        __m512 a[4][4];
        FULL_UNROLL
        for (int c = 0; c < 4; c++)
            FULL_UNROLL
            for (int b = 0; b < 4; b++)
                a[c][b] = _mm512_setzero_ps();
        const float *w = p->wk + ((size_t)h * NK + (size_t)o0) * L;
        for (int i = 0; i < L; i++) {
            const float *col = ct + (size_t)i * PAGE;
            const __m512 x0 = _mm512_loadu_ps(col), x1 = _mm512_loadu_ps(col + 16), x2 = _mm512_loadu_ps(col + 32),
                         x3 = _mm512_loadu_ps(col + 48);
            FULL_UNROLL
            for (int c = 0; c < 4; c++) {
                const __m512 wc = _mm512_set1_ps(c < no ? w[(size_t)c * L + i] : 0.0f);
                a[c][0] = _mm512_fmadd_ps(wc, x0, a[c][0]);
                a[c][1] = _mm512_fmadd_ps(wc, x1, a[c][1]);
                a[c][2] = _mm512_fmadd_ps(wc, x2, a[c][2]);
                a[c][3] = _mm512_fmadd_ps(wc, x3, a[c][3]);
            }
        }
        for (int c = 0; c < no; c++)
            FULL_UNROLL
            for (int b = 0; b < 4; b++)
                _mm512_storeu_ps(head_tile + (size_t)(o0 + c) * PAGE + 16 * b, a[c][b]);
    }

    /* values: [PAGE][NV], each row sum_l c[l] * wv[l][h * NV ..] */
    float *v = head_tile + fg_mha_head_v_offset(p);
    const float *wv = p->wv + (size_t)h * NV;
    for (int r0 = 0; r0 < n_rows; r0 += 4) {
        const int nr = n_rows - r0 < 4 ? n_rows - r0 : 4;
        for (int cb = 0; cb < NV; cb += 64) {
            __mmask16 mk[4];
            __m512 a[4][4];
            FULL_UNROLL
            for (int k = 0; k < 4; k++) {
                mk[k] = lanes(NV - cb - 16 * k);
                FULL_UNROLL
                for (int rr = 0; rr < 4; rr++)
                    a[rr][k] = _mm512_setzero_ps();
            }
            for (int i = 0; i < L; i++) {
                const float *wr = wv + (size_t)i * W + cb;
                __m512 x[4];
                FULL_UNROLL
                for (int k = 0; k < 4; k++)
                    x[k] = _mm512_maskz_loadu_ps(mk[k], wr + 16 * k);
                FULL_UNROLL
                for (int rr = 0; rr < 4; rr++) { /* rows past the page's: zeros in ct, results not stored */
                    const __m512 c = _mm512_set1_ps(ct[(size_t)i * PAGE + r0 + rr]);
                    FULL_UNROLL
                    for (int k = 0; k < 4; k++)
                        a[rr][k] = _mm512_fmadd_ps(c, x[k], a[rr][k]);
                }
            }
            for (int rr = 0; rr < nr; rr++)
                FULL_UNROLL
                for (int k = 0; k < 4; k++)
                    _mm512_mask_storeu_ps(v + (size_t)(r0 + rr) * NV + cb + 16 * k, mk[k], a[rr][k]);
        }
    }
}

/* The attention of NQ (1 .. FG_MHA_GROUP, a constant in each instance) queries
 * of one head over a page: each key and value vector is loaded once for all
 * of them. Per query the operations and their order are those of NQ = 1:
 * the same fused multiply-add chains for its scores, its own maximum, and its
 * weighted sum over exactly its own rows (the rows all queries reach first,
 * then each query's further rows alone). */
static inline __attribute__((always_inline)) void attend_group(const fg_mha_attn_params *p, const float *page_tile,
                                                               const float *head_tile, int page, const int NQ,
                                                               const int *n,
                                                               const float *const *q_nope,
                                                               const float *const *q_rope, float *const *o,
                                                               float *const *m, float *const *l, float *pw)
{
    const int R = p->n_rope, NK = p->n_nope, NV = p->n_v, W = NV;
    const float *k = head_tile, *kr_t = fg_mha_page_kr(p, page_tile), *v = head_tile + fg_mha_head_v_offset(p);

    /* scores: rows in lanes, 4 blocks of 16 rows per query */
    __m512 s[FG_MHA_GROUP][4];
    FULL_UNROLL
    for (int q = 0; q < NQ; q++)
        FULL_UNROLL
        for (int b = 0; b < 4; b++)
            s[q][b] = _mm512_setzero_ps();
    for (int j = 0; j < NK; j++) {
        const float *kj = k + (size_t)j * PAGE;
        const __m512 x0 = _mm512_loadu_ps(kj), x1 = _mm512_loadu_ps(kj + 16), x2 = _mm512_loadu_ps(kj + 32),
                     x3 = _mm512_loadu_ps(kj + 48);
        FULL_UNROLL
        for (int q = 0; q < NQ; q++) {
            const __m512 qv = _mm512_set1_ps(q_nope[q][j]);
            s[q][0] = _mm512_fmadd_ps(qv, x0, s[q][0]);
            s[q][1] = _mm512_fmadd_ps(qv, x1, s[q][1]);
            s[q][2] = _mm512_fmadd_ps(qv, x2, s[q][2]);
            s[q][3] = _mm512_fmadd_ps(qv, x3, s[q][3]);
        }
    }
    for (int j = 0; j < R; j++) {
        const float *kj = kr_t + (size_t)j * PAGE;
        const __m512 x0 = _mm512_loadu_ps(kj), x1 = _mm512_loadu_ps(kj + 16), x2 = _mm512_loadu_ps(kj + 32),
                     x3 = _mm512_loadu_ps(kj + 48);
        FULL_UNROLL
        for (int q = 0; q < NQ; q++) {
            const __m512 qv = _mm512_set1_ps(q_rope[q][j]);
            s[q][0] = _mm512_fmadd_ps(qv, x0, s[q][0]);
            s[q][1] = _mm512_fmadd_ps(qv, x1, s[q][1]);
            s[q][2] = _mm512_fmadd_ps(qv, x2, s[q][2]);
            s[q][3] = _mm512_fmadd_ps(qv, x3, s[q][3]);
        }
    }

    /* per query: the page's maximum, the weights (into pw), their sum, the rescale */
    const int first = page == 0;
    const __m512 scale = _mm512_set1_ps(p->scale);
    float corr[FG_MHA_GROUP], psum[FG_MHA_GROUP];
    int n_all = PAGE; /* rows every query of the group reaches */
    FULL_UNROLL
    for (int q = 0; q < NQ; q++) {
        __m512 mxv = _mm512_set1_ps(-INFINITY);
        FULL_UNROLL
        for (int b = 0; b < 4; b++) {
            s[q][b] = _mm512_mul_ps(s[q][b], scale);
            mxv = _mm512_mask_max_ps(mxv, lanes(n[q] - 16 * b), mxv, s[q][b]);
        }
        const float mx = _mm512_reduce_max_ps(mxv);
        const float m_new = first || mx > *m[q] ? mx : *m[q];
        corr[q] = first ? 0.0f : expf(*m[q] - m_new);
        *m[q] = m_new;
        const __m512 mv = _mm512_set1_ps(m_new);
        __m512 sum = _mm512_setzero_ps();
        FULL_UNROLL
        for (int b = 0; b < 4; b++) {
            const __m512 e = _mm512_maskz_mov_ps(lanes(n[q] - 16 * b), fg_exp_avx512(_mm512_sub_ps(s[q][b], mv)));
            sum = _mm512_add_ps(sum, e);
            _mm512_storeu_ps(pw + q * PAGE + 16 * b, e);
        }
        psum[q] = _mm512_reduce_add_ps(sum);
        n_all = n[q] < n_all ? n[q] : n_all;
    }

    /* o = o * corr + sum_r p_r v_r, 64 value channels at a time */
    for (int cb = 0; cb < NV; cb += 64) {
        __mmask16 mk[4];
        __m512 a[FG_MHA_GROUP][4];
        FULL_UNROLL
        for (int c = 0; c < 4; c++)
            mk[c] = lanes(NV - cb - 16 * c);
        FULL_UNROLL
        for (int q = 0; q < NQ; q++) {
            const __m512 cv = _mm512_set1_ps(corr[q]);
            FULL_UNROLL
            for (int c = 0; c < 4; c++)
                a[q][c] = first ? _mm512_setzero_ps()
                                : _mm512_mul_ps(_mm512_maskz_loadu_ps(mk[c], o[q] + cb + 16 * c), cv);
        }
        int r = 0;
        for (; r < n_all; r++) {
            const float *vr = v + (size_t)r * W + cb;
            const __m512 x0 = _mm512_maskz_loadu_ps(mk[0], vr), x1 = _mm512_maskz_loadu_ps(mk[1], vr + 16),
                         x2 = _mm512_maskz_loadu_ps(mk[2], vr + 32), x3 = _mm512_maskz_loadu_ps(mk[3], vr + 48);
            FULL_UNROLL
            for (int q = 0; q < NQ; q++) {
                const __m512 pr = _mm512_set1_ps(pw[q * PAGE + r]);
                a[q][0] = _mm512_fmadd_ps(pr, x0, a[q][0]);
                a[q][1] = _mm512_fmadd_ps(pr, x1, a[q][1]);
                a[q][2] = _mm512_fmadd_ps(pr, x2, a[q][2]);
                a[q][3] = _mm512_fmadd_ps(pr, x3, a[q][3]);
            }
        }
        FULL_UNROLL
        for (int q = 0; q < NQ; q++) {
            for (int rq = r; rq < n[q]; rq++) { /* this query's rows past the common ones */
                const float *vr = v + (size_t)rq * W + cb;
                const __m512 pr = _mm512_set1_ps(pw[q * PAGE + rq]);
                FULL_UNROLL
                for (int c = 0; c < 4; c++)
                    a[q][c] = _mm512_fmadd_ps(pr, _mm512_maskz_loadu_ps(mk[c], vr + 16 * c), a[q][c]);
            }
            FULL_UNROLL
            for (int c = 0; c < 4; c++)
                _mm512_mask_storeu_ps(o[q] + cb + 16 * c, mk[c], a[q][c]);
        }
    }
    FULL_UNROLL
    for (int q = 0; q < NQ; q++)
        *l[q] = first ? psum[q] : *l[q] * corr[q] + psum[q];
}

void fg_mha_attend_avx512(const fg_mha_attn_params *p, const float *page_tile, const float *head_tile, int page,
                          int h, int n_q, const int *n, const float *const *q_nope, const float *const *q_rope,
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

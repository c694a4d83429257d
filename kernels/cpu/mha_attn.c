/* mha_attn.c: the decompressed-form attention of mha_attn.h: the scalar
 * reference, the page loading (shared by every kernel: the dequantization is
 * fg_kv_dequantize's) and the dispatcher to the AVX-512 kernels
 * (mha_attn_avx512.c) and the AVX2 ones (mha_attn_avx2.c).
 *
 * Decompression: every key and value element of a row is one sum over the
 * latent in channel order. Attention: per page, the scores of the rows the
 * query reaches, one running-maximum update (and one rescale of o) for the
 * page, then o += sum_j p_j v_j. The page-at-a-time update is what makes a
 * query's bits independent of its chunk: the page boundaries are absolute
 * positions.
 */
#include "kernels/cpu/mha_attn.h"

#include "kernels/cpu/mha_attn_isa.h"

#include <math.h>
#include <string.h>

size_t fg_mha_page_tile_floats(const fg_mha_attn_params *p)
{
    return (size_t)FG_MHA_PAGE * (size_t)(p->kv_lora + p->n_rope);
}

size_t fg_mha_head_tile_floats(const fg_mha_attn_params *p)
{
    return (size_t)FG_MHA_PAGE * (size_t)(p->n_nope + p->n_v);
}

size_t fg_mha_scratch_floats(const fg_mha_attn_params *p)
{
    const size_t row = (size_t)(p->kv_lora + p->n_rope), group = (size_t)FG_MHA_PAGE * FG_MHA_GROUP;
    return row > group ? row : group; /* a dequantized row, or a group's scores or weights */
}

/* The kernel the params' isa resolves to: AUTO is the best this CPU runs;
 * an ISA the CPU lacks, or SCALAR, runs the reference. */
static fg_isa kernel_isa(const fg_mha_attn_params *p)
{
    const fg_isa isa = p->isa == FG_ISA_AUTO ? fg_isa_best() : p->isa;
    if ((isa == FG_ISA_AVX512 || isa == FG_ISA_AVX2) && fg_isa_supported(isa))
        return isa;
    return FG_ISA_SCALAR;
}

void fg_mha_load_page(const fg_mha_attn_params *p, int page, int n_rows, float *page_tile, float *scratch)
{
    const int L = p->kv_lora, R = p->n_rope;
    float *row = scratch;
    float *kr_t = page_tile + (size_t)L * FG_MHA_PAGE;
    if (n_rows > FG_MHA_PAGE)
        n_rows = FG_MHA_PAGE;
    for (int r = 0; r < FG_MHA_PAGE; r++) {
        if (r < n_rows) {
            const uint8_t *src = fg_mha_row(p, page * FG_MHA_PAGE + r);
            fg_kv_dequantize(p->format, src, L, row);
            if (R > 0)
                fg_kv_dequantize(p->format, src + fg_kv_bytes(p->format, L), R, row + L);
        } else {
            memset(row, 0, (size_t)(L + R) * sizeof *row); /* absent rows: zeros, so every lane computes on numbers */
        }
        for (int i = 0; i < L; i++)
            page_tile[(size_t)i * FG_MHA_PAGE + r] = row[i];
        for (int j = 0; j < R; j++)
            kr_t[(size_t)j * FG_MHA_PAGE + r] = row[L + j];
    }
}

/* Each element is one sum over the latent channels in order; the loops run
 * the channels outside and the rows or value channels inside, so the inner
 * loop reads memory in order (the sums and their bits are the same). */
static void decompress_scalar(const fg_mha_attn_params *p, const float *page_tile, int n_rows, int h,
                              float *head_tile)
{
    const int H = p->n_head, L = p->kv_lora, NK = p->n_nope, NV = p->n_v;
    float *v = head_tile + fg_mha_head_v_offset(p);
    for (int j = 0; j < NK; j++) {
        const float *w = p->wk + ((size_t)h * NK + j) * L;
        float *k = head_tile + (size_t)j * FG_MHA_PAGE;
        for (int r = 0; r < n_rows; r++)
            k[r] = 0.0f;
        for (int i = 0; i < L; i++) {
            const float *col = page_tile + (size_t)i * FG_MHA_PAGE;
            for (int r = 0; r < n_rows; r++)
                k[r] += w[i] * col[r];
        }
    }
    for (int r = 0; r < n_rows; r++) {
        float *vr = v + (size_t)r * NV;
        for (int j = 0; j < NV; j++)
            vr[j] = 0.0f;
        for (int i = 0; i < L; i++) {
            const float c = page_tile[(size_t)i * FG_MHA_PAGE + r];
            const float *w = p->wv + (size_t)i * H * NV + (size_t)h * NV;
            for (int j = 0; j < NV; j++)
                vr[j] += c * w[j];
        }
    }
}

/* One page's update for one query's first n rows of it (n >= 1). */
static void attend_scalar(const fg_mha_attn_params *p, const float *page_tile, const float *head_tile, int page,
                          int n, const float *q_nope, const float *q_rope, float *o, float *m, float *l,
                          float *scratch)
{
    const int R = p->n_rope, NK = p->n_nope, NV = p->n_v;
    const float *kr_t = fg_mha_page_kr(p, page_tile), *v = head_tile + fg_mha_head_v_offset(p);
    float *s = scratch;
    float mx = -INFINITY;
    for (int r = 0; r < n; r++) /* each score one sum, key channels then rope channels in order */
        s[r] = 0.0f;
    for (int j = 0; j < NK; j++)
        for (int r = 0; r < n; r++)
            s[r] += q_nope[j] * head_tile[(size_t)j * FG_MHA_PAGE + r];
    for (int j = 0; j < R; j++)
        for (int r = 0; r < n; r++)
            s[r] += q_rope[j] * kr_t[(size_t)j * FG_MHA_PAGE + r];
    for (int r = 0; r < n; r++) {
        s[r] *= p->scale;
        mx = s[r] > mx ? s[r] : mx;
    }
    const int first = page == 0;
    const float m_new = first || mx > *m ? mx : *m;
    const float corr = first ? 0.0f : expf(*m - m_new);
    float sum = 0.0f;
    if (first)
        memset(o, 0, (size_t)NV * sizeof *o);
    else
        for (int j = 0; j < NV; j++)
            o[j] *= corr;
    for (int r = 0; r < n; r++) {
        const float pr = expf(s[r] - m_new);
        sum += pr;
        for (int j = 0; j < NV; j++)
            o[j] += pr * v[(size_t)r * NV + j];
    }
    *l = first ? sum : *l * corr + sum;
    *m = m_new;
}

void fg_mha_decompress(const fg_mha_attn_params *p, const float *page_tile, int n_rows, int h, float *head_tile)
{
    if (n_rows < 1)
        return;
    if (n_rows > FG_MHA_PAGE)
        n_rows = FG_MHA_PAGE;
    switch (kernel_isa(p)) {
    case FG_ISA_AVX512: fg_mha_decompress_avx512(p, page_tile, n_rows, h, head_tile); break;
    case FG_ISA_AVX2: fg_mha_decompress_avx2(p, page_tile, n_rows, h, head_tile); break;
    default: decompress_scalar(p, page_tile, n_rows, h, head_tile); break;
    }
}

void fg_mha_attend(const fg_mha_attn_params *p, const float *page_tile, const float *head_tile, int page, int n_rows,
                   int h, int n_q, const int *n_kv, const float *const *q_nope, const float *const *q_rope,
                   float *const *o, float *const *m, float *const *l, float *scratch)
{
    const fg_isa isa = kernel_isa(p);
    for (int i0 = 0; i0 < n_q; i0 += FG_MHA_GROUP) {
        /* the group's queries that reach into this page, with their row counts */
        int idx[FG_MHA_GROUP], n[FG_MHA_GROUP], g = 0;
        for (int i = i0; i < n_q && i < i0 + FG_MHA_GROUP; i++) {
            int r = n_kv[i] - page * FG_MHA_PAGE;
            r = r < n_rows ? r : n_rows;
            r = r < FG_MHA_PAGE ? r : FG_MHA_PAGE;
            if (r >= 1) {
                idx[g] = i;
                n[g++] = r;
            }
        }
        if (isa == FG_ISA_SCALAR) {
            for (int k = 0; k < g; k++)
                attend_scalar(p, page_tile, head_tile, page, n[k], q_nope[idx[k]], q_rope[idx[k]], o[idx[k]],
                              m[idx[k]], l[idx[k]], scratch);
            continue;
        }
        const float *qn[FG_MHA_GROUP], *qr[FG_MHA_GROUP];
        float *oo[FG_MHA_GROUP], *mm[FG_MHA_GROUP], *ll[FG_MHA_GROUP];
        for (int k = 0; k < g; k++) {
            qn[k] = q_nope[idx[k]];
            qr[k] = q_rope[idx[k]];
            oo[k] = o[idx[k]];
            mm[k] = m[idx[k]];
            ll[k] = l[idx[k]];
        }
        if (g > 0 && isa == FG_ISA_AVX512)
            fg_mha_attend_avx512(p, page_tile, head_tile, page, h, g, n, qn, qr, oo, mm, ll, scratch);
        else if (g > 0)
            fg_mha_attend_avx2(p, page_tile, head_tile, page, h, g, n, qn, qr, oo, mm, ll, scratch);
    }
}

void fg_mha_finish(int n_v, float *o, float l)
{
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int j = 0; j < n_v; j++)
        o[j] *= inv;
}

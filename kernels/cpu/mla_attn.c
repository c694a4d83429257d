/* mla_attn.c: absorbed-MLA attention of mla_attn.h, one pass, online softmax.
 *
 * For each cached token the row is dequantized once into scratch (latent then
 * rope part, contiguous), then every head updates its running maximum m, its
 * running denominator l and its unnormalised output o (kept in out_lat):
 *   s > m:  o = o * e^(m - s) + c,   l = l * e^(m - s) + 1,   m = s
 *   else :  p = e^(s - m),  o += p * c,  l += p
 * and at the end out = o / l. The first token initialises (m, l, o) = (s, 1, c),
 * so no e^(-inf) is ever taken. The cost is one dequantization per row for all
 * heads and one rescale of o per new maximum.
 *
 * This file is also the dispatcher: fg_mla_attn_part and fg_mla_attn_multi
 * hand the call to the AVX-512 kernel (mla_attn_avx512.c) or the AVX2 one
 * (mla_attn_avx2.c) when the params' isa resolves to it.
 *
 * Scratch, in floats: the part's (reference: [kv_lora + n_rope] row; AVX2 and AVX-512:
 * [FG_MLA_ATTN_CHUNK][row stride] rows and [H][FG_MLA_ATTN_CHUNK] scores), and
 * at the end m, then l: [H] each for fg_mla_attn, [FG_MLA_ATTN_MAX_QUERIES][H]
 * each for fg_mla_attn_multi.
 *
 * fg_mla_attn_multi's reference takes the rows outermost and the queries inside:
 * each row is dequantized once for the group, and each query sees the same
 * sequence of updates as part_scalar (its first row initialises), so the two
 * agree bit for bit.
 */
#include "kernels/cpu/mla_attn.h"

#include "kernels/cpu/mla_attn_isa.h"

#include <math.h>
#include <string.h>

/* Floats the part needs (the vector kernels' need covers the reference's row). */
static size_t part_scratch_floats(const fg_mla_attn_params *p)
{
    return (size_t)FG_MLA_ATTN_CHUNK * (size_t)fg_mla_attn_row_stride(p) + (size_t)p->n_head * FG_MLA_ATTN_CHUNK;
}

/* The multi-query kernels tile the cache a page at a time. */
_Static_assert(FG_MLA_ATTN_CHUNK == FG_KV_PAGE_TOKENS, "multi-query tiles are whole pages");
_Static_assert(FG_MLA_ATTN_PART_ROWS % FG_KV_PAGE_TOKENS == 0, "parts are whole pages, so chunks do not cross them");

/* One query's state of a part: o [H][L], m [H], l [H]. */
static size_t state_floats(const fg_mla_attn_params *p) { return (size_t)p->n_head * ((size_t)p->kv_lora + 2); }

size_t fg_mla_attn_scratch_floats(const fg_mla_attn_params *p)
{
    /* the part's, then m and l: [H] each for fg_mla_attn, [MAX_QUERIES][H] each for the multi-query call,
     * then the states of the part after the first: one, [MAX_QUERIES] for the multi-query call */
    return part_scratch_floats(p) + (2 * (size_t)p->n_head + state_floats(p)) * FG_MLA_ATTN_MAX_QUERIES;
}

void fg_mla_attn_fold(int n_head, int kv_lora, float *o, float *m, float *l, const float *o2, const float *m2,
                      const float *l2)
{
    for (int h = 0; h < n_head; h++) {
        if (l2[h] == 0.0f)
            continue; /* an empty part */
        const float mx = m2[h] > m[h] ? m2[h] : m[h];
        const float wa = l[h] == 0.0f ? 0.0f : expf(m[h] - mx), wb = expf(m2[h] - mx);
        float *oh = o + (size_t)h * kv_lora;
        const float *o2h = o2 + (size_t)h * kv_lora;
        for (int i = 0; i < kv_lora; i++)
            oh[i] = oh[i] * wa + o2h[i] * wb;
        l[h] = l[h] * wa + l2[h] * wb;
        m[h] = mx;
    }
}

void fg_mla_attn_finish(int n_head, int kv_lora, float *o, const float *l)
{
    for (int h = 0; h < n_head; h++) {
        float *oh = o + (size_t)h * kv_lora;
        const float inv = 1.0f / l[h];
        for (int i = 0; i < kv_lora; i++)
            oh[i] *= inv;
    }
}

/* The kernel the params' isa resolves to: AUTO is the best this CPU runs;
 * an ISA the CPU lacks runs the scalar reference (mla_attn.h). */
static fg_isa kernel_isa(const fg_mla_attn_params *p)
{
    const fg_isa isa = p->isa == FG_ISA_AUTO ? fg_isa_best() : p->isa;
    if ((isa == FG_ISA_AVX512 || isa == FG_ISA_AVX2) && fg_isa_supported(isa))
        return isa;
    return FG_ISA_SCALAR;
}

/* Eight interleaved partial sums: the compiler can keep them in vector
 * registers (a single running sum cannot be vectorised without reassociation),
 * and each is an eighth as long, which also shortens the rounding-error chain. */
static float dot(const float *a, const float *b, int n)
{
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += a[i + j] * b[i + j];
    for (; i < n; i++)
        acc[i & 7] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* Row t of the cache into c [L] and kr [R]. */
static void load_row(const fg_mla_attn_params *p, int t, float *c, float *kr)
{
    const uint8_t *row = p->pages[t / FG_KV_PAGE_TOKENS] + p->layer_offset +
                         (size_t)(t % FG_KV_PAGE_TOKENS) * p->row_bytes;
    fg_kv_dequantize(p->format, row, p->kv_lora, c);
    if (p->n_rope > 0)
        fg_kv_dequantize(p->format, row + fg_kv_bytes(p->format, p->kv_lora), p->n_rope, kr);
}

/* One query's online-softmax update by one row (c, kr), every head; `first`:
 * the query's first row, which initialises (m, l, o). */
static void row_update(const fg_mla_attn_params *p, const float *c, const float *kr, int first, const float *q_lat,
                       const float *q_rope, float *o_all, float *m, float *l)
{
    const int H = p->n_head, L = p->kv_lora, R = p->n_rope;
    for (int h = 0; h < H; h++) {
        float *o = o_all + (size_t)h * L;
        const float s = p->scale * (dot(q_lat + (size_t)h * L, c, L) + dot(q_rope + (size_t)h * R, kr, R));
        if (first) {
            m[h] = s;
            l[h] = 1.0f;
            memcpy(o, c, (size_t)L * sizeof *o);
        } else if (s > m[h]) {
            const float corr = expf(m[h] - s);
            for (int i = 0; i < L; i++)
                o[i] = o[i] * corr + c[i];
            l[h] = l[h] * corr + 1.0f;
            m[h] = s;
        } else {
            const float pr = expf(s - m[h]);
            for (int i = 0; i < L; i++)
                o[i] += pr * c[i];
            l[h] += pr;
        }
    }
}

/* The reference: one online-softmax update per cached row. */
static void part_scalar(const fg_mla_attn_params *p, int t_begin, int t_end, const float *q_lat,
                        const float *q_rope, float *o_all, float *m, float *l, float *scratch)
{
    float *c = scratch;                /* [L] latent of the current row */
    float *kr = scratch + p->kv_lora;  /* [R] rope key of the current row */
    for (int t = t_begin; t < t_end; t++) {
        load_row(p, t, c, kr);
        row_update(p, c, kr, t == t_begin, q_lat, q_rope, o_all, m, l);
    }
}

/* Query i's state of its current part after the first, in part [MAX_QUERIES][state]. */
static void state_at(const fg_mla_attn_params *p, float *part, int i, float **o, float **m, float **l)
{
    const int H = p->n_head, L = p->kv_lora;
    *o = part + (size_t)i * state_floats(p);
    *m = *o + (size_t)H * L;
    *l = *m + H;
}

/* At row t, the end of a part after the first (t a multiple of
 * FG_MLA_ATTN_PART_ROWS, or the end of the longest query): every query that
 * read rows of that part folds it into its running state (out_lat, m, l). */
static void fold_parts(const fg_mla_attn_params *p, int n_q, const int *n_kv, int t, float *out_lat, float *m,
                       float *l, float *part)
{
    const int H = p->n_head, L = p->kv_lora;
    if (t <= FG_MLA_ATTN_PART_ROWS)
        return; /* only the first part: it is the state */
    const int begin = (t - 1) / FG_MLA_ATTN_PART_ROWS * FG_MLA_ATTN_PART_ROWS;
    for (int i = 0; i < n_q; i++) {
        if (n_kv[i] <= begin)
            continue;
        float *o2, *m2, *l2;
        state_at(p, part, i, &o2, &m2, &l2);
        fg_mla_attn_fold(H, L, out_lat + (size_t)i * H * L, m + (size_t)i * H, l + (size_t)i * H, o2, m2, l2);
    }
}

/* The multi-query reference for n_q <= FG_MLA_ATTN_MAX_QUERIES queries. */
static void multi_scalar(const fg_mla_attn_params *p, int n_q, const int *n_kv, const float *q_lat,
                         const float *q_rope, float *out_lat, float *m, float *l, float *part, float *scratch)
{
    const int H = p->n_head, L = p->kv_lora, R = p->n_rope;
    float *c = scratch, *kr = scratch + L;
    int n_max = 0;
    for (int i = 0; i < n_q; i++)
        n_max = n_kv[i] > n_max ? n_kv[i] : n_max;
    for (int t = 0; t < n_max; t++) {
        if (t % FG_MLA_ATTN_PART_ROWS == 0 && t > FG_MLA_ATTN_PART_ROWS)
            fold_parts(p, n_q, n_kv, t, out_lat, m, l, part);
        load_row(p, t, c, kr);
        for (int i = 0; i < n_q; i++)
            if (t < n_kv[i]) {
                float *o = out_lat + (size_t)i * H * L, *mi = m + (size_t)i * H, *li = l + (size_t)i * H;
                if (t >= FG_MLA_ATTN_PART_ROWS)
                    state_at(p, part, i, &o, &mi, &li);
                row_update(p, c, kr, t % FG_MLA_ATTN_PART_ROWS == 0, q_lat + (size_t)i * H * L,
                           q_rope + (size_t)i * H * R, o, mi, li);
            }
    }
    fold_parts(p, n_q, n_kv, n_max, out_lat, m, l, part);
}

/* (m, l, o) = (-inf, 0, 0): also an empty part's state (weight 0 in the fold);
 * for the fast kernels the first chunk's maximum replaces m with a rescale
 * factor of 0, which clears o and l without reading them. */
static void state_init(int H, int L, float *o_all, float *m, float *l)
{
    for (int h = 0; h < H; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
    }
    memset(o_all, 0, (size_t)H * (size_t)L * sizeof *o_all);
}

/* The fast kernels' walk for one query: chunks of at most FG_MLA_ATTN_CHUNK
 * rows that never cross a page. */
static void part_fast(const fg_mla_attn_kernels *k, const fg_mla_attn_params *p, int t_begin, int t_end,
                      const float *q_lat, const float *q_rope, float *o_all, float *m, float *l, float *scratch)
{
    const int stride = fg_mla_attn_row_stride(p);
    float *rows = scratch;                                            /* [CHUNK][stride] */
    float *s = scratch + (size_t)FG_MLA_ATTN_CHUNK * (size_t)stride; /* [H][CHUNK] */
    state_init(p->n_head, p->kv_lora, o_all, m, l);
    for (int c0 = t_begin; c0 < t_end;) {
        const int page = c0 / FG_KV_PAGE_TOKENS, first = c0 % FG_KV_PAGE_TOKENS;
        int n = FG_KV_PAGE_TOKENS - first;
        if (n > t_end - c0)
            n = t_end - c0;
        if (n > FG_MLA_ATTN_CHUNK)
            n = FG_MLA_ATTN_CHUNK;
        k->dequant_rows(p, p->pages[page], first, n, stride, rows);
        k->chunk_update(p, rows, stride, n, q_lat, q_rope, o_all, m, l, s);
        c0 += n;
    }
}

/* The chunks are those part_fast takes for t_begin = 0 (whole pages, the
 * last one cut at the query's n_kv): one tile of a page's rows, dequantized
 * once up to the longest query's end, serves every query that reaches into
 * the page, each over its own first rows of the tile; so each query's bits
 * are those it gets alone. */
static void multi_fast(const fg_mla_attn_kernels *k, const fg_mla_attn_params *p, int n_q, const int *n_kv,
                       const float *q_lat, const float *q_rope, float *out_lat, float *m, float *l, float *part,
                       float *scratch)
{
    const int H = p->n_head, L = p->kv_lora, R = p->n_rope, C = FG_MLA_ATTN_CHUNK;
    const int stride = fg_mla_attn_row_stride(p);
    float *rows = scratch;                            /* [CHUNK][stride] */
    float *s = scratch + (size_t)C * (size_t)stride; /* [H][CHUNK] */
    int n_max = 0;
    for (int i = 0; i < n_q; i++) {
        state_init(H, L, out_lat + (size_t)i * H * L, m + (size_t)i * H, l + (size_t)i * H);
        n_max = n_kv[i] > n_max ? n_kv[i] : n_max;
    }
    for (int c0 = 0; c0 < n_max; c0 += C) {
        if (c0 % FG_MLA_ATTN_PART_ROWS == 0 && c0 > 0) { /* a new part: fold the one before, start afresh */
            fold_parts(p, n_q, n_kv, c0, out_lat, m, l, part);
            for (int i = 0; i < n_q; i++) {
                float *o2, *m2, *l2;
                state_at(p, part, i, &o2, &m2, &l2);
                if (n_kv[i] > c0)
                    state_init(H, L, o2, m2, l2);
            }
        }
        const int n_tile = n_max - c0 < C ? n_max - c0 : C;
        k->dequant_rows(p, p->pages[c0 / FG_KV_PAGE_TOKENS], 0, n_tile, stride, rows);
        for (int i = 0; i < n_q; i++) {
            const int n = n_kv[i] - c0 < C ? n_kv[i] - c0 : C;
            if (n <= 0)
                continue;
            float *o = out_lat + (size_t)i * H * L, *mi = m + (size_t)i * H, *li = l + (size_t)i * H;
            if (c0 >= FG_MLA_ATTN_PART_ROWS)
                state_at(p, part, i, &o, &mi, &li);
            k->chunk_update(p, rows, stride, n, q_lat + (size_t)i * H * L, q_rope + (size_t)i * H * R, o, mi, li, s);
        }
    }
    fold_parts(p, n_q, n_kv, n_max, out_lat, m, l, part);
}

/* The fast kernels for the params' isa, NULL for the scalar reference. */
static const fg_mla_attn_kernels *fast_kernels(const fg_mla_attn_params *p)
{
    switch (kernel_isa(p)) {
    case FG_ISA_AVX512: return &fg_mla_attn_kernels_avx512;
    case FG_ISA_AVX2: return &fg_mla_attn_kernels_avx2;
    default: return NULL;
    }
}

void fg_mla_attn_part(const fg_mla_attn_params *p, int t_begin, int t_end, const float *q_lat,
                      const float *q_rope, float *o_all, float *m, float *l, float *scratch)
{
    const int H = p->n_head, L = p->kv_lora;
    if (t_begin < 0)
        t_begin = 0;
    if (t_end > p->n_kv)
        t_end = p->n_kv;
    if (t_end <= t_begin) { /* an empty part: weight 0 in the fold */
        state_init(H, L, o_all, m, l);
        return;
    }
    const fg_mla_attn_kernels *k = fast_kernels(p);
    if (k)
        part_fast(k, p, t_begin, t_end, q_lat, q_rope, o_all, m, l, scratch);
    else
        part_scalar(p, t_begin, t_end, q_lat, q_rope, o_all, m, l, scratch);
}

void fg_mla_attn(const fg_mla_attn_params *p, const float *q_lat, const float *q_rope, float *out_lat,
                 float *scratch)
{
    const int H = p->n_head, L = p->kv_lora, P = FG_MLA_ATTN_PART_ROWS;
    float *m = scratch + part_scratch_floats(p); /* [H] running max */
    float *l = m + H;                            /* [H] running denominator */
    float *o2, *m2, *l2;                         /* the state of a part after the first */
    state_at(p, scratch + part_scratch_floats(p) + 2 * (size_t)H * FG_MLA_ATTN_MAX_QUERIES, 0, &o2, &m2, &l2);
    if (p->n_kv <= 0) { /* outside the contract; an empty attention is defined as 0 */
        memset(out_lat, 0, (size_t)H * (size_t)L * sizeof *out_lat);
        return;
    }
    fg_mla_attn_part(p, 0, P, q_lat, q_rope, out_lat, m, l, scratch);
    for (int t = P; t < p->n_kv; t += P) {
        fg_mla_attn_part(p, t, t + P, q_lat, q_rope, o2, m2, l2, scratch);
        fg_mla_attn_fold(H, L, out_lat, m, l, o2, m2, l2);
    }
    fg_mla_attn_finish(H, L, out_lat, l);
}

void fg_mla_attn_multi(const fg_mla_attn_params *p, int n_q, const int *n_kv, const float *q_lat,
                       const float *q_rope, float *out_lat, float *scratch)
{
    const int H = p->n_head, L = p->kv_lora, R = p->n_rope;
    float *m = scratch + part_scratch_floats(p); /* [MAX_QUERIES][H] running max */
    float *l = m + (size_t)H * FG_MLA_ATTN_MAX_QUERIES; /* [MAX_QUERIES][H] running denominator */
    const fg_mla_attn_kernels *fast = fast_kernels(p);
    for (int q0 = 0; q0 < n_q; q0 += FG_MLA_ATTN_MAX_QUERIES) {
        const int g = n_q - q0 < FG_MLA_ATTN_MAX_QUERIES ? n_q - q0 : FG_MLA_ATTN_MAX_QUERIES;
        const float *ql = q_lat + (size_t)q0 * H * L, *qr = q_rope + (size_t)q0 * H * R;
        float *out = out_lat + (size_t)q0 * H * L;
        float *part = l + (size_t)H * FG_MLA_ATTN_MAX_QUERIES; /* [MAX_QUERIES]: states of a later part */
        if (fast)
            multi_fast(fast, p, g, n_kv + q0, ql, qr, out, m, l, part, scratch);
        else
            multi_scalar(p, g, n_kv + q0, ql, qr, out, m, l, part, scratch);
        for (int i = 0; i < g; i++)
            for (int h = 0; h < H; h++) {
                float *o = out + ((size_t)i * H + h) * L;
                if (n_kv[q0 + i] <= 0) { /* an empty query is defined as 0, as in fg_mla_attn */
                    memset(o, 0, (size_t)L * sizeof *o);
                    continue;
                }
                const float inv = 1.0f / l[(size_t)i * H + h];
                for (int k = 0; k < L; k++)
                    o[k] *= inv;
            }
    }
}

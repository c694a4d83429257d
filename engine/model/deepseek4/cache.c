/* cache.c: the deepseek4 cache layout (pages and per-sequence state) and its
 * row codecs; cache.h has the picture. */
#include "engine/model/deepseek4/cache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/numeric.h"

static size_t pad4(size_t n) { return (n + 3) & ~(size_t)3; }

static size_t row_bytes(fg_kv_format f, int D, int rd)
{
    switch (f) {
    case FG_KV_F32: return pad4((size_t)D * 4);
    case FG_KV_F16: return pad4((size_t)D * 2);
    case FG_KV_FP8: return pad4(fg_kv_bytes(FG_KV_FP8, D - rd) + (size_t)rd * 2);
    default: return 0;
    }
}

static size_t key_bytes(fg_kv_format f, int Di)
{
    switch (f) {
    case FG_KV_F32: return pad4((size_t)Di * 4);
    case FG_KV_F16: return pad4((size_t)Di * 2);
    case FG_KV_FP8: return pad4(fg_kv_bytes(FG_KV_FP4, Di));
    default: return 0;
    }
}

fg_err fg_ds4_cache_layout(const fg_ds4_hparams *hp, fg_kv_format format, fg_ds4_cache **out, fg_diag *diag)
{
    *out = NULL;
    if (format != FG_KV_F32 && format != FG_KV_F16 && format != FG_KV_FP8)
        return fg_diag_set(diag, FG_ERR_KV_FORMAT,
                           "KV format %s: deepseek4 stores f32, f16 or fp8 (FP8 no-RoPE + BF16 RoPE channels, FP4 "
                           "index keys)",
                           fg_kv_format_name(format) ? fg_kv_format_name(format) : "?");
    if (format == FG_KV_FP8 && (hp->head_dim == hp->n_rope || hp->idx_dim % 16))
        return fg_diag_set(diag, FG_ERR_KV_FORMAT,
                           "KV format fp8 needs no-RoPE channels (key_length %d > rope dims %d) and index keys in "
                           "multiples of 16 (indexer.key_length %d)",
                           hp->head_dim, hp->n_rope, hp->idx_dim);
    fg_ds4_cache *c = calloc(1, sizeof *c + (size_t)hp->n_layer_all * sizeof c->layer[0]);
    if (!c)
        return fg_diag_set(diag, FG_ERR_NOMEM, "cache layout: out of memory");
    c->format = format;
    c->n_layer_all = hp->n_layer_all;
    c->head_dim = hp->head_dim;
    c->n_rope = hp->n_rope;
    c->idx_dim = hp->idx_dim;
    c->row_bytes = row_bytes(format, hp->head_dim, hp->n_rope);
    c->key_bytes = key_bytes(format, hp->idx_dim);
    c->part_bytes = pad4((c->row_bytes + (FG_DS4_HCA / FG_KV_PAGE_TOKENS) - 1) / (FG_DS4_HCA / FG_KV_PAGE_TOKENS));
    size_t page = 0;
    size_t st = pad4(sizeof(fg_ds4_state_head));
    c->state_h = st;
    st += (size_t)FG_DS4_HC * (size_t)hp->n_embd * sizeof(float);
    for (int il = 0; il < hp->n_layer_all; il++) {
        fg_ds4_layer_cache *L = &c->layer[il];
        const int r = hp->ratio[il];
        L->state_window = st;
        st += (size_t)hp->window * c->row_bytes;
        if (r == FG_DS4_CSA) {
            L->page_rows = page;
            page += (size_t)(FG_KV_PAGE_TOKENS / r) * c->row_bytes;
            L->page_keys = page;
            page += (size_t)(FG_KV_PAGE_TOKENS / r) * c->key_bytes;
            L->state_comp = st;
            st += (size_t)2 * r * 2 * (2 * (size_t)hp->head_dim) * sizeof(float);
            L->state_idx = st;
            st += (size_t)2 * r * 2 * (2 * (size_t)hp->idx_dim) * sizeof(float);
        } else if (r == FG_DS4_HCA) {
            L->page_rows = page;
            page += c->part_bytes;
            L->state_comp = st; /* the online softmax's max, sum and weighted k per channel */
            st += (size_t)3 * (size_t)hp->head_dim * sizeof(float);
        }
    }
    /* A model without compressed layers still has pages (the store needs a
     * size); they hold nothing. */
    c->page_bytes = page ? page : 4;
    c->seq_bytes = st;
    *out = c;
    return FG_OK;
}

void fg_ds4_cache_geometry(const fg_ds4_cache *c, const fg_ds4_hparams *hp, fg_kv_geometry *geo)
{
    memset(geo, 0, sizeof *geo);
    geo->format = c->format;
    geo->n_layer = hp->n_layer_all;
    geo->kv_lora = hp->head_dim;
    geo->n_rope = hp->n_rope;
    geo->latent_bytes = c->row_bytes;
    geo->row_bytes = c->row_bytes;
    geo->page_bytes = c->page_bytes;
    geo->bytes_per_token = (c->page_bytes + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    geo->seq_bytes = c->seq_bytes;
    /* Sharing by whole blocks of the widest ratio: a 128-ratio row is written
     * into the page before the closing token's, and at such a boundary every
     * compressor block is closed, so a snapshot of the state there is exact. */
    geo->share_tokens = FG_KV_PAGE_TOKENS;
    for (int il = 0; il < hp->n_layer_all; il++)
        while (hp->ratio[il] > 0 && geo->share_tokens % hp->ratio[il])
            geo->share_tokens += FG_KV_PAGE_TOKENS;
}

/* f16 or (bf16 false) BF16 */
static void half_put(bool f16, const float *x, int n, uint8_t *dst)
{
    for (int i = 0; i < n; i++) {
        uint16_t h = f16 ? fg_f32_to_f16(x[i]) : fg_f32_to_bf16(x[i]);
        memcpy(dst + 2 * i, &h, 2);
    }
}

static void half_get(bool f16, const uint8_t *src, int n, float *y)
{
    if (!f16) { /* BF16 is an f32's upper half: fg_bf16_to_f32 as a loop the compiler vectorizes */
        for (int i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            const uint32_t u = (uint32_t)h << 16;
            memcpy(y + i, &u, sizeof u);
        }
        return;
    }
    for (int i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        y[i] = f16 ? fg_f16_to_f32(h) : fg_bf16_to_f32(h);
    }
}

void fg_ds4_row_put(const fg_ds4_cache *c, const float *x, uint8_t *dst)
{
    const int D = c->head_dim, nope = D - c->n_rope;
    switch (c->format) {
    case FG_KV_F32: memcpy(dst, x, (size_t)D * 4); break;
    case FG_KV_F16: half_put(true, x, D, dst); break;
    default:
        fg_kv_quantize(FG_KV_FP8, x, nope, dst);
        half_put(false, x + nope, c->n_rope, dst + fg_kv_bytes(FG_KV_FP8, nope));
        break;
    }
}

void fg_ds4_row_get(const fg_ds4_cache *c, const uint8_t *src, float *y)
{
    const int D = c->head_dim, nope = D - c->n_rope;
    switch (c->format) {
    case FG_KV_F32: memcpy(y, src, (size_t)D * 4); break;
    case FG_KV_F16: half_get(true, src, D, y); break;
    default:
        fg_kv_dequantize(FG_KV_FP8, src, nope, y);
        half_get(false, src + fg_kv_bytes(FG_KV_FP8, nope), c->n_rope, y + nope);
        break;
    }
}

void fg_ds4_key_put(const fg_ds4_cache *c, const float *x, uint8_t *dst)
{
    switch (c->format) {
    case FG_KV_F32: memcpy(dst, x, (size_t)c->idx_dim * 4); break;
    case FG_KV_F16: half_put(true, x, c->idx_dim, dst); break;
    default: fg_kv_quantize(FG_KV_FP4, x, c->idx_dim, dst); break;
    }
}

void fg_ds4_key_get(const fg_ds4_cache *c, const uint8_t *src, float *y)
{
    switch (c->format) {
    case FG_KV_F32: memcpy(y, src, (size_t)c->idx_dim * 4); break;
    case FG_KV_F16: half_get(true, src, c->idx_dim, y); break;
    default: fg_kv_dequantize(FG_KV_FP4, src, c->idx_dim, y); break;
    }
}

/* Row j of ratio r <= 64: page j*r/64, slot j mod 64/r; ratio 128: part k of
 * the row in page 2j + k. */
void fg_ds4_comp_store(const fg_ds4_cache *c, const fg_kv_seq *q, int il, int r, int j, const float *x, uint8_t *tmp)
{
    const size_t off = c->layer[il].page_rows;
    if (r <= FG_KV_PAGE_TOKENS) {
        const int per = FG_KV_PAGE_TOKENS / r;
        fg_ds4_row_put(c, x, q->pages[j / per] + off + (size_t)(j % per) * c->row_bytes);
        return;
    }
    const int parts = r / FG_KV_PAGE_TOKENS;
    memset(tmp, 0, c->part_bytes * (size_t)parts);
    fg_ds4_row_put(c, x, tmp);
    for (int k = 0; k < parts; k++)
        memcpy(q->pages[j * parts + k] + off, tmp + (size_t)k * c->part_bytes, c->part_bytes);
}

void fg_ds4_comp_prefetch(const fg_ds4_cache *c, const fg_kv_seq *q, int il, int r, int j)
{
    if (r > FG_KV_PAGE_TOKENS)
        return;
    const int per = FG_KV_PAGE_TOKENS / r;
    const uint8_t *row = q->pages[j / per] + c->layer[il].page_rows + (size_t)(j % per) * c->row_bytes;
    for (size_t b = 0; b < c->row_bytes; b += 64)
        __builtin_prefetch(row + b);
    __builtin_prefetch(row + c->row_bytes - 1);
}

void fg_ds4_comp_load(const fg_ds4_cache *c, const fg_kv_seq *q, int il, int r, int j, float *y, uint8_t *tmp)
{
    const size_t off = c->layer[il].page_rows;
    if (r <= FG_KV_PAGE_TOKENS) {
        const int per = FG_KV_PAGE_TOKENS / r;
        fg_ds4_row_get(c, q->pages[j / per] + off + (size_t)(j % per) * c->row_bytes, y);
        return;
    }
    const int parts = r / FG_KV_PAGE_TOKENS;
    for (int k = 0; k < parts; k++)
        memcpy(tmp + (size_t)k * c->part_bytes, q->pages[j * parts + k] + off, c->part_bytes);
    fg_ds4_row_get(c, tmp, y);
}

void fg_ds4_key_store(const fg_ds4_cache *c, const fg_kv_seq *q, int il, int j, const float *x)
{
    const int per = FG_KV_PAGE_TOKENS / FG_DS4_CSA;
    fg_ds4_key_put(c, x, q->pages[j / per] + c->layer[il].page_keys + (size_t)(j % per) * c->key_bytes);
}

const uint8_t *fg_ds4_key_at(const fg_ds4_cache *c, const fg_kv_seq *q, int il, int j)
{
    const int per = FG_KV_PAGE_TOKENS / FG_DS4_CSA;
    return q->pages[j / per] + c->layer[il].page_keys + (size_t)(j % per) * c->key_bytes;
}

void fg_ds4_key_load(const fg_ds4_cache *c, const fg_kv_seq *q, int il, int j, float *y)
{
    fg_ds4_key_get(c, fg_ds4_key_at(c, q, il, j), y);
}

void fg_ds4_flash_geometry(fg_ds4_hparams *hp)
{
    static int ratio[44];
    static float clamp[44];
    memset(hp, 0, sizeof *hp);
    hp->n_layer = 43;
    hp->n_layer_all = 44;
    hp->n_nextn = 1;
    hp->n_embd = 4096;
    hp->n_head = 64;
    hp->head_dim = 512;
    hp->n_rope = 64;
    hp->q_lora = 1024;
    hp->window = 128;
    hp->idx_head = 64;
    hp->idx_dim = 128;
    hp->idx_top_k = 512;
    for (int il = 0; il < 44; il++) {
        ratio[il] = il < 2 || il == 43 ? 0 : il == 42 ? FG_DS4_CSA : (il % 2 == 0 ? FG_DS4_CSA : FG_DS4_HCA);
        clamp[il] = 10.0f;
    }
    hp->ratio = ratio;
    hp->clamp_exp = hp->clamp_shexp = clamp;
}

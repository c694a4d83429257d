/* cache.h: the deepseek4 cache of one sequence, and its row formats.
 *
 * Growing part, in the store's pages (FG_KV_PAGE_TOKENS = 64 tokens each):
 *   per compressed layer (ratio r = 4 or 128) its compressed rows, one per r
 *   tokens: a page holds 64/r rows (r <= 64) or 64/r of one row's bytes (r =
 *   128: row j is split over pages 2j and 2j+1), so a page costs exactly 64
 *   tokens' share; per CSA layer (r = 4) also one index key per 4 tokens.
 * Fixed part, in the sequence's state (geo->seq_bytes):
 *   a header (the token count the state matches, the MTP block's input h),
 *   per layer the window ring (sliding_window rows, slot pos mod window), and
 *   per CSA compressor its open block and the previous one (f32 k and score
 *   for each of the block's 4 tokens, 2*width wide); per HCA compressor the
 *   open block as an online softmax (running max, sum, weighted k per
 *   channel: 3 D f32 instead of 128 x 2 D).
 *
 * Row formats (fg_kv_format):
 *   F32  every channel f32 (the reference);
 *   F16  every channel f16 (llama.cpp's default cache);
 *   FP8  the compact default, after the official serving layout: a row's
 *        D - rd no-RoPE channels in FP8 E4M3 with one f32 scale (kvquant
 *        FP8), its rd RoPE channels in BF16; index keys in FP4 (E2M1 with an
 *        E4M3 scale per 16, kvquant FP4).
 * INT8 and FP4 are refused (FG_ERR_KV_FORMAT).
 *
 * Pure functions of the model and format; safe from any thread.
 */
#ifndef FG_DS4_CACHE_H
#define FG_DS4_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/kv/kv_store.h"
#include "engine/model/deepseek4/model.h"

typedef struct fg_ds4_layer_cache {
    size_t page_rows;      /* offset in a page of this layer's compressed rows (r != 0) */
    size_t page_keys;      /* offset in a page of its index keys (r = 4) */
    size_t state_window;   /* offset in the state of the window ring */
    size_t state_comp;     /* of the compressor: CSA [2][4][2][2D] f32 (block, token, k|score, channel);
                              HCA [3][D] f32 (max, sum, weighted k) */
    size_t state_idx;      /* of the indexer compressor's: [2][r][2][2*Di] */
} fg_ds4_layer_cache;

typedef struct fg_ds4_cache {
    fg_kv_format format;
    int n_layer_all;
    int head_dim, n_rope, idx_dim;
    size_t row_bytes;      /* one D-wide row (window and compressed), padded to 4 */
    size_t key_bytes;      /* one Di-wide index key, padded to 4 */
    size_t part_bytes;     /* the share of a 128-ratio row in one page, padded to 4 */
    size_t page_bytes;
    size_t seq_bytes;
    size_t state_h;        /* offset of the MTP input h [4][E] f32 */
    fg_ds4_layer_cache layer[]; /* [n_layer_all] */
} fg_ds4_cache;

/* The state header: the number of tokens the state holds (a sequence whose
 * n_tokens differs was truncated or rewound: refused). */
typedef struct fg_ds4_state_head {
    int32_t n_tokens;
    int32_t pad_;
} fg_ds4_state_head;

/* The layout for m and format (malloc'd; free()). Errors: FG_ERR_KV_FORMAT,
 * FG_ERR_NOMEM. */
fg_err fg_ds4_cache_layout(const fg_ds4_hparams *hp, fg_kv_format format, fg_ds4_cache **out, fg_diag *diag);

/* The store geometry (page, row and sequence bytes) of a layout. */
void fg_ds4_cache_geometry(const fg_ds4_cache *c, const fg_ds4_hparams *hp, fg_kv_geometry *geo);

/* Encodes / decodes one D-wide row (window or compressed) or a Di-wide index key. */
void fg_ds4_row_put(const fg_ds4_cache *c, const float *x, uint8_t *dst);
void fg_ds4_row_get(const fg_ds4_cache *c, const uint8_t *src, float *y);
void fg_ds4_key_put(const fg_ds4_cache *c, const float *x, uint8_t *dst);
void fg_ds4_key_get(const fg_ds4_cache *c, const uint8_t *src, float *y);

/* A metadata-only hparams of V4 Flash's released geometry (43 layers, ratios
 * [0,0] + [4,128]x20 + [4], D 512, rd 64, Di 128, window 128, E 4096, one
 * MTP block): for reporting cache bytes without the weights. ratio/clamp
 * point into static storage; not thread-safe to modify. */
void fg_ds4_flash_geometry(fg_ds4_hparams *hp);



/* Compressed row j of layer il (ratio r) and index key j of a CSA layer, in
 * q's pages (which must exist): store encodes x, load decodes into y. tmp:
 * part_bytes * FG_DS4_HCA / FG_KV_PAGE_TOKENS bytes of scratch, which can
 * exceed row_bytes by the parts' padding (a 128-ratio row is gathered from
 * its two pages). */
void fg_ds4_comp_store(const fg_ds4_cache *c, const fg_kv_seq *q, int il, int r, int j, const float *x, uint8_t *tmp);
void fg_ds4_comp_load(const fg_ds4_cache *c, const fg_kv_seq *q, int il, int r, int j, float *y, uint8_t *tmp);
/* Asks the CPU to start fetching compressed row j of a ratio r <= 64 layer
 * (nothing for wider ratios): attention reads its top-k rows in no order the
 * hardware can predict. */
void fg_ds4_comp_prefetch(const fg_ds4_cache *c, const fg_kv_seq *q, int il, int r, int j);
void fg_ds4_key_store(const fg_ds4_cache *c, const fg_kv_seq *q, int il, int j, const float *x);
void fg_ds4_key_load(const fg_ds4_cache *c, const fg_kv_seq *q, int il, int j, float *y);
/* Index key j of CSA layer il as stored (fp8 format: kvquant.h's FP4 bytes). */
const uint8_t *fg_ds4_key_at(const fg_ds4_cache *c, const fg_kv_seq *q, int il, int j);
#endif

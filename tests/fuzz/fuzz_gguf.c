/* fuzz_gguf.c: libFuzzer target for the GGUF reader.
 *
 * Opens the input with fg_gguf_open_memory; when it parses, walks every key
 * through every getter (array elements included) and touches the first and
 * last byte of every tensor's data, so that anything the reader hands out as
 * valid is actually inside the input. A failed open must clear the out
 * pointer and say why in the diag.
 *
 * Then loads the file as the architecture it names (deepseek2 or deepseek4:
 * every key and tensor check of the loaders) and, when that succeeds, asks
 * for its cache layout in every format.
 *
 * The seed corpus is tests/fuzz/corpus/fuzz_gguf/ (tiny files from the
 * writer, seed_deepseek4: a small make_v4_fixture.py model, and
 * seed_deepseek2_mtp: a deepseek2 file with the MTP block, from
 * `flashgate-modelgen --preset tiny --seed 3 --embd 32 --layers 1 --nextn 1
 * --type q8_0`).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/arch.h"
#include "engine/model/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Folded into a volatile sink so that the reads cannot be optimised away. */
static volatile uint64_t sink;

static void touch(const void *p, uint64_t n)
{
    if (n == 0)
        return;
    const volatile uint8_t *b = p;
    sink += b[0] + b[n - 1];
}

static uint64_t elem_size(fg_gguf_vtype t)
{
    switch (t) {
    case FG_GGUF_UINT8:
    case FG_GGUF_INT8:
    case FG_GGUF_BOOL:
        return 1;
    case FG_GGUF_UINT16:
    case FG_GGUF_INT16:
        return 2;
    case FG_GGUF_UINT32:
    case FG_GGUF_INT32:
    case FG_GGUF_FLOAT32:
        return 4;
    case FG_GGUF_UINT64:
    case FG_GGUF_INT64:
    case FG_GGUF_FLOAT64:
        return 8;
    default:
        abort(); /* get_arr_data must refuse strings and nested arrays */
    }
}

static void walk_key(const fg_gguf_t *g, uint64_t i)
{
    const char *key = fg_gguf_key_name(g, i);
    if (!key || fg_gguf_find_key(g, key) != (int64_t)i)
        abort(); /* names are unique and indexed */
    uint32_t u32;
    int64_t i64;
    float f;
    bool b;
    fg_gguf_str s;
    fg_gguf_vtype et;
    uint64_t n;
    const void *arr;
    sink += fg_gguf_get_u32(g, key, &u32) == FG_OK ? u32 : 0;
    sink += fg_gguf_get_i64(g, key, &i64) == FG_OK ? (uint64_t)i64 : 0;
    sink += fg_gguf_get_f32(g, key, &f) == FG_OK ? (f == f) : 0;
    sink += fg_gguf_get_bool(g, key, &b) == FG_OK ? b : 0;
    if (fg_gguf_get_str(g, key, &s) == FG_OK)
        touch(s.ptr, s.len);
    if (fg_gguf_get_arr(g, key, &et, &n) != FG_OK)
        return;
    if (fg_gguf_get_arr_data(g, key, &arr) == FG_OK)
        touch(arr, n * elem_size(et)); /* the packed elements lie inside the input */
    for (uint64_t k = 0; k < n; k++) {
        if (fg_gguf_get_arr_str(g, key, k, &s) == FG_OK)
            touch(s.ptr, s.len);
        if (fg_gguf_get_arr_i64(g, key, k, &i64) == FG_OK)
            sink += (uint64_t)i64;
    }
    if (fg_gguf_get_arr_str(g, key, n, &s) == FG_OK || fg_gguf_get_arr_i64(g, key, n, &i64) == FG_OK)
        abort(); /* index == count must be refused */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_gguf_t *g = NULL;
    fg_diag diag = {{0}};
    fg_err e = fg_gguf_open_memory(data, size, &g, &diag);
    if (e != FG_OK) {
        if (g || diag.msg[0] == '\0')
            abort(); /* failures must clear out and say why */
        return 0;
    }
    uint64_t nk = fg_gguf_key_count(g);
    for (uint64_t i = 0; i < nk; i++)
        walk_key(g, i);
    const uint8_t *base = fg_gguf_file_bytes(g);
    uint64_t nt = fg_gguf_tensor_count(g);
    for (uint64_t i = 0; i < nt; i++) {
        const fg_gguf_tensor *t = fg_gguf_tensor_at(g, i);
        if (!t || fg_gguf_find_tensor(g, t->name) != t)
            abort();
        const uint8_t *p = t->data;
        if (p < base || (uint64_t)(p - base) > size || t->nbytes > size - (uint64_t)(p - base) ||
            (uint64_t)(p - base) % fg_gguf_alignment(g) != 0)
            abort(); /* the reader promised an in-bounds, aligned range */
        if (fg_ggml_row_bytes(t->type, t->ne[0]) * (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3] !=
            t->nbytes)
            abort();
        touch(p, t->nbytes);
    }
    fg_arch_model *m = NULL;
    fg_diag ld = {{0}};
    if (fg_arch_load(g, &m, &ld) == FG_OK) {
        for (int f = 0; f < FG_KV__COUNT; f++) {
            fg_kv_geometry geo;
            fg_diag cd = {{0}};
            if (m->arch->cache(m, (fg_kv_format)f, &geo, &cd) != FG_OK && cd.msg[0] == '\0')
                abort();
        }
        fg_arch_free(m);
    } else if (m || ld.msg[0] == '\0') {
        abort(); /* a refused model says why and hands nothing out */
    }
    fg_gguf_close(g);
    return 0;
}

/* gguf.c: validating GGUF v2/v3 reader.
 *
 * Design: the file is mapped read-only (or borrowed) and parsed once, front to
 * back, by a bounds-checked cursor. Nothing is trusted: every read checks the
 * bytes that remain, every count is checked against a hard limit and against
 * the smallest encoding that the remaining bytes could hold before anything is
 * allocated for it, and all size arithmetic is overflow-checked. After open,
 * the directory is immutable, so getters need no locks.
 *
 * What open keeps:
 *   - one kv_entry per key: its name (NUL-terminated copy), type, and a pointer
 *     to its value bytes inside the file; STRING arrays also get a table of
 *     element pointers so that element i is O(1) (vocabularies are read by
 *     index, 100k+ times);
 *   - one fg_gguf_tensor per tensor, with its data pointer;
 *   - two open-addressing hash indexes (keys, tensor names) that also detect
 *     duplicates during the parse. The hash is seeded per open so that a file
 *     crafted to collide cannot turn the O(n) parse into O(n^2).
 * Names are copied into a chunked arena: one allocation per 64 KiB, not per name.
 *
 * Values stay little-endian in the file; we decode them with explicit byte
 * loads. Tensor data and fg_gguf_get_arr_data() hand out raw file bytes, which
 * is only meaningful on a little-endian host, hence the #error below.
 */
#include "engine/model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config/base/random.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "flashgate hands out raw little-endian GGUF data; a big-endian host needs byte swapping"
#endif

/* Nested arrays deeper than this are refused: no model uses them, and the
 * validator recurses once per level. */
#define GGUF_MAX_ARRAY_DEPTH 8

/* The smallest possible encodings, used to bound counts by the bytes left:
 * a key is a string length (8), a type (4) and at least a 1-byte value; a
 * tensor info is a name length (8), n_dims (4), one ne (8), type (4), offset (8). */
#define GGUF_MIN_KV_BYTES 13u
#define GGUF_MIN_TENSOR_BYTES 32u
#define GGUF_HEADER_BYTES 24u /* magic, version, n_tensors, n_kv */

/* ---------------------------------------------------------------- type table */

typedef struct ggml_type_info {
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
    bool computable; /* the engine's products read it (fg_ggml_type_computable) */
} ggml_type_info;

/* Every type id of ggml's enum ggml_type, with block sizes as its block_*
 * structs define them (QK_K = 256). Gaps (4, 5, 31..33, 36..38) are ids ggml
 * retired; files using them are rejected. */
static const ggml_type_info ggml_types[] = {
    [0] = {"f32", 1, 4, true},
    [1] = {"f16", 1, 2, true},
    [2] = {"q4_0", 32, 18, true},
    [3] = {"q4_1", 32, 20, true},
    [6] = {"q5_0", 32, 22, true},
    [7] = {"q5_1", 32, 24, true},
    [8] = {"q8_0", 32, 34, true},
    [9] = {"q8_1", 32, 36, false},
    [10] = {"q2_K", 256, 84, true},
    [11] = {"q3_K", 256, 110, true},
    [12] = {"q4_K", 256, 144, true},
    [13] = {"q5_K", 256, 176, true},
    [14] = {"q6_K", 256, 210, true},
    [15] = {"q8_K", 256, 292, false},
    [16] = {"iq2_xxs", 256, 66, false},
    [17] = {"iq2_xs", 256, 74, false},
    [18] = {"iq3_xxs", 256, 98, false},
    [19] = {"iq1_s", 256, 50, false},
    [20] = {"iq4_nl", 32, 18, true},
    [21] = {"iq3_s", 256, 110, false},
    [22] = {"iq2_s", 256, 82, false},
    [23] = {"iq4_xs", 256, 136, true},
    [24] = {"i8", 1, 1, false},
    [25] = {"i16", 1, 2, false},
    [26] = {"i32", 1, 4, false},
    [27] = {"i64", 1, 8, false},
    [28] = {"f64", 1, 8, false},
    [29] = {"iq1_m", 256, 56, false},
    [30] = {"bf16", 1, 2, true},
    [34] = {"tq1_0", 256, 54, false},
    [35] = {"tq2_0", 256, 66, false},
    [39] = {"mxfp4", 32, 17, true},
    [40] = {"nvfp4", 64, 36, false},
    [41] = {"q1_0", 128, 18, false},
    [42] = {"q2_0", 64, 18, false},
};

static const ggml_type_info *type_info(uint32_t type)
{
    if (type >= sizeof ggml_types / sizeof ggml_types[0] || !ggml_types[type].name)
        return NULL;
    return &ggml_types[type];
}

const char *fg_ggml_type_name(uint32_t type)
{
    const ggml_type_info *ti = type_info(type);
    return ti ? ti->name : NULL;
}

bool fg_ggml_type_size(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes)
{
    const ggml_type_info *ti = type_info(type);
    if (!ti)
        return false;
    if (block_elems)
        *block_elems = ti->block_elems;
    if (block_bytes)
        *block_bytes = ti->block_bytes;
    return true;
}

bool fg_ggml_type_computable(uint32_t type)
{
    const ggml_type_info *ti = type_info(type);
    return ti && ti->computable;
}

fg_err fg_ggml_check_computable(const char *tensor, uint32_t type, fg_diag *diag)
{
    if (fg_ggml_type_computable(type))
        return FG_OK;
    const char *name = fg_ggml_type_name(type);
    if (!name)
        return fg_diag_set(diag, FG_ERR_MODEL_TYPE, "tensor %s has unknown ggml type id %" PRIu32, tensor, type);
    /* the list is the table's: it cannot fall behind what binding accepts */
    char list[256];
    size_t len = 0;
    list[0] = 0;
    for (size_t i = 0; i < sizeof ggml_types / sizeof ggml_types[0]; i++)
        if (ggml_types[i].computable && len < sizeof list) {
            int k = snprintf(list + len, sizeof list - len, "%s%s", len ? ", " : "", ggml_types[i].name);
            len += k > 0 ? (size_t)k : 0;
        }
    return fg_diag_set(diag, FG_ERR_MODEL_TYPE, "tensor %s has type %s; the engine computes with %s", tensor, name,
                       list);
}

uint64_t fg_ggml_row_bytes(uint32_t type, int64_t n)
{
    const ggml_type_info *ti = type_info(type);
    if (!ti || n < 0 || (uint64_t)n % ti->block_elems != 0)
        return 0;
    uint64_t blocks = (uint64_t)n / ti->block_elems;
    if (blocks > UINT64_MAX / ti->block_bytes)
        return 0;
    return blocks * ti->block_bytes;
}

fg_err fg_ggml_tensor_bytes(uint32_t type, uint32_t n_dims, const int64_t *ne, uint64_t *nbytes,
                            fg_diag *diag)
{
    const ggml_type_info *ti = type_info(type);
    if (!ti)
        return fg_diag_set(diag, FG_ERR_GGUF_TENSOR_TYPE, "unknown ggml type %" PRIu32, type);
    if (n_dims < 1 || n_dims > FG_GGUF_MAX_DIMS)
        return fg_diag_set(diag, FG_ERR_GGUF_LIMIT, "n_dims %" PRIu32 " outside 1..%d", n_dims,
                           FG_GGUF_MAX_DIMS);
    /* The element count must fit int64 even when a dimension is 0, because
     * consumers compute strides from the leading dimensions; so the product
     * is taken over max(ne, 1). */
    int64_t elems = 1;
    for (uint32_t i = 0; i < n_dims; i++) {
        if (ne[i] < 0)
            return fg_diag_set(diag, FG_ERR_GGUF_LIMIT, "ne[%" PRIu32 "] = %" PRId64 " is negative", i, ne[i]);
        int64_t d = ne[i] ? ne[i] : 1;
        if (elems > INT64_MAX / d)
            return fg_diag_set(diag, FG_ERR_GGUF_LIMIT, "element count overflows int64 at ne[%" PRIu32 "]", i);
        elems *= d;
    }
    if (ne[0] % ti->block_elems != 0)
        return fg_diag_set(diag, FG_ERR_GGUF_LIMIT,
                           "ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRIu32, ne[0],
                           ti->name, ti->block_elems);
    uint64_t bytes = fg_ggml_row_bytes(type, ne[0]);
    if (ne[0] != 0 && bytes == 0)
        return fg_diag_set(diag, FG_ERR_GGUF_LIMIT, "row of %" PRId64 " %s elements overflows", ne[0], ti->name);
    for (uint32_t i = 1; i < n_dims; i++) {
        uint64_t d = (uint64_t)ne[i];
        if (d != 0 && bytes > UINT64_MAX / d)
            return fg_diag_set(diag, FG_ERR_GGUF_LIMIT, "byte size overflows at ne[%" PRIu32 "]", i);
        bytes *= d;
    }
    *nbytes = bytes;
    return FG_OK;
}

/* ------------------------------------------------------ value type helpers */

/* Encoded size of a fixed-size value type; 0 for STRING, ARRAY and unknown ids. */
static uint32_t vtype_fixed_size(uint32_t t)
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
        return 0;
    }
}

static bool vtype_known(uint32_t t)
{
    return t <= FG_GGUF_FLOAT64;
}

/* Smallest encoding of one value of type t (bounds array counts). */
static uint32_t vtype_min_size(uint32_t t)
{
    if (t == FG_GGUF_STRING)
        return 8; /* length only */
    if (t == FG_GGUF_ARRAY)
        return 12; /* element type + count */
    return vtype_fixed_size(t);
}

static bool vtype_is_int(uint32_t t)
{
    switch (t) {
    case FG_GGUF_UINT8:
    case FG_GGUF_INT8:
    case FG_GGUF_UINT16:
    case FG_GGUF_INT16:
    case FG_GGUF_UINT32:
    case FG_GGUF_INT32:
    case FG_GGUF_UINT64:
    case FG_GGUF_INT64:
        return true;
    default:
        return false;
    }
}

static const char *vtype_name(uint32_t t)
{
    static const char *const names[] = {"u8",  "i8",  "u16",  "i16",    "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

static uint64_t load_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* An integer value of any width, kept exactly: unsigned types fill u, signed
 * types fill s; neg tells which range it is in. */
typedef struct int_value {
    bool neg;
    uint64_t u; /* valid when !neg */
    int64_t s;  /* valid when neg */
} int_value;

static int_value load_int(uint32_t t, const uint8_t *p)
{
    int_value v = {false, 0, 0};
    uint32_t n = vtype_fixed_size(t);
    uint64_t raw = load_le(p, n);
    bool is_signed = t == FG_GGUF_INT8 || t == FG_GGUF_INT16 || t == FG_GGUF_INT32 || t == FG_GGUF_INT64;
    if (is_signed && n < 8 && (raw >> (8 * n - 1)) & 1)
        raw |= ~(uint64_t)0 << (8 * n); /* sign-extend */
    if (is_signed && (raw >> 63)) {
        v.neg = true;
        /* two's complement reinterpretation without implementation-defined casts */
        v.s = -(int64_t)(~raw) - 1;
    } else {
        v.u = raw;
    }
    return v;
}

static fg_err int_to_i64(int_value v, int64_t *out)
{
    if (v.neg) {
        *out = v.s;
        return FG_OK;
    }
    if (v.u > (uint64_t)INT64_MAX)
        return FG_ERR_GGUF_KEY_TYPE;
    *out = (int64_t)v.u;
    return FG_OK;
}

/* ------------------------------------------------------------------ structs */

typedef struct kv_entry {
    const char *name;        /* NUL-terminated copy in the arena */
    uint32_t type;           /* fg_gguf_vtype */
    uint32_t elem_type;      /* ARRAY only */
    uint64_t count;          /* STRING: byte length; ARRAY: element count */
    const uint8_t *val;      /* scalar bytes, string bytes, or first array element */
    const uint8_t **str_elems; /* STRING arrays: each element's length prefix */
    const uint8_t *raw;      /* the encoded value as on disk (after its type id) */
    uint64_t raw_len;
} kv_entry;

typedef struct name_block {
    struct name_block *next;
    size_t used, cap;
    char bytes[];
} name_block;

typedef struct name_index {
    uint32_t *slots; /* entry index + 1; 0 = empty */
    uint64_t mask;
} name_index;

struct fg_gguf {
    const uint8_t *base;
    uint64_t size;
    bool mapped;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    uint64_t hash_seed;

    uint64_t n_kv;
    kv_entry *kv;
    name_index kv_index;

    uint64_t n_tensors;
    fg_gguf_tensor *tensors;
    name_index tensor_index;

    name_block *names;
};

/* ------------------------------------------------------------- name arena */

static char *arena_copy(fg_gguf_t *g, const uint8_t *s, uint64_t len)
{
    name_block *b = g->names;
    if (!b || b->cap - b->used < len + 1) {
        size_t cap = len + 1 > 65536 ? (size_t)len + 1 : 65536;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->next = g->names;
        b->used = 0;
        b->cap = cap;
        g->names = b;
    }
    char *dst = b->bytes + b->used;
    memcpy(dst, s, (size_t)len);
    dst[len] = '\0';
    b->used += (size_t)len + 1;
    return dst;
}

/* -------------------------------------------------------------- hash index */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* A seeded multiply-mix hash over 8-byte words. Not cryptographic; the seed
 * only has to keep collisions out of reach of a file written in advance. */
static uint64_t name_hash(uint64_t seed, const char *s, size_t len)
{
    uint64_t h = seed ^ (len * 0x9e3779b97f4a7c15ull);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = mix64(h ^ w);
        s += 8;
        len -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, len);
    return mix64(h ^ w ^ 0x5bd1e995ull);
}

static fg_err index_init(name_index *ix, uint64_t n)
{
    uint64_t cap = 8;
    while (cap < 2 * n) /* load factor <= 1/2; n <= 2^20 so no overflow */
        cap <<= 1;
    ix->slots = calloc((size_t)cap, sizeof *ix->slots);
    ix->mask = cap - 1;
    return ix->slots ? FG_OK : FG_ERR_NOMEM;
}

typedef const char *(*name_at_fn)(const fg_gguf_t *g, uint32_t i);

static const char *kv_name_at(const fg_gguf_t *g, uint32_t i)
{
    return g->kv[i].name;
}

static const char *tensor_name_at(const fg_gguf_t *g, uint32_t i)
{
    return g->tensors[i].name;
}

/* The slot that holds `name`, or the empty slot where it would go. */
static uint32_t *index_slot(const fg_gguf_t *g, const name_index *ix, name_at_fn name_at, const char *name)
{
    uint64_t i = name_hash(g->hash_seed, name, strlen(name)) & ix->mask;
    for (;;) {
        uint32_t *slot = &ix->slots[i];
        if (*slot == 0 || strcmp(name_at(g, *slot - 1), name) == 0)
            return slot;
        i = (i + 1) & ix->mask;
    }
}

static int64_t index_find(const fg_gguf_t *g, const name_index *ix, name_at_fn name_at, const char *name)
{
    if (!g || !name || !ix->slots)
        return -1;
    uint32_t *slot = index_slot(g, ix, name_at, name);
    return *slot ? (int64_t)*slot - 1 : -1;
}

/* ------------------------------------------------------------------ cursor */

typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    fg_diag *diag;
    char where[112]; /* "key 'x'" / "tensor 'y'": prefixes every message */
} cursor;

static fg_err cur_fail(cursor *c, fg_err e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static fg_err cur_fail(cursor *c, fg_err e, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fg_diag_set(c->diag, e, "gguf: %s%s%s", c->where, c->where[0] ? ": " : "", msg);
}

/* Names come from the file: print at most 64 bytes and only printable ASCII,
 * so a hostile name cannot garble logs. */
static void cur_where(cursor *c, const char *what, const uint8_t *name, uint64_t len)
{
    char clean[72];
    size_t n = len > 64 ? 64 : (size_t)len;
    for (size_t i = 0; i < n; i++)
        clean[i] = name[i] >= 0x20 && name[i] < 0x7f ? (char)name[i] : '?';
    clean[n] = '\0';
    snprintf(c->where, sizeof c->where, "%s '%s%s'", what, clean, len > 64 ? "..." : "");
}

static uint64_t cur_left(const cursor *c)
{
    return c->size - c->pos;
}

static fg_err cur_need(cursor *c, uint64_t n, const char *what)
{
    if (n > cur_left(c))
        return cur_fail(c, FG_ERR_GGUF_TRUNCATED,
                        "file ends inside %s at offset %" PRIu64 " (%" PRIu64 " bytes needed, %" PRIu64 " left)",
                        what, c->pos, n, cur_left(c));
    return FG_OK;
}

static fg_err cur_u32(cursor *c, const char *what, uint32_t *v)
{
    fg_err e = cur_need(c, 4, what);
    if (e)
        return e;
    *v = (uint32_t)load_le(c->base + c->pos, 4);
    c->pos += 4;
    return FG_OK;
}

static fg_err cur_u64(cursor *c, const char *what, uint64_t *v)
{
    fg_err e = cur_need(c, 8, what);
    if (e)
        return e;
    *v = load_le(c->base + c->pos, 8);
    c->pos += 8;
    return FG_OK;
}

/* A GGUF string: u64 length, then the bytes (not NUL-terminated). */
static fg_err cur_str(cursor *c, const char *what, const uint8_t **s, uint64_t *len)
{
    uint64_t at = c->pos;
    fg_err e = cur_u64(c, what, len);
    if (e)
        return e;
    if (*len > FG_GGUF_MAX_STRING)
        return cur_fail(c, FG_ERR_GGUF_LIMIT, "%s at offset %" PRIu64 " has length %" PRIu64 " (limit %u)", what,
                        at, *len, FG_GGUF_MAX_STRING);
    if ((e = cur_need(c, *len, what)))
        return e;
    *s = c->base + c->pos;
    c->pos += *len;
    return FG_OK;
}

/* Checks that `count` items of at least `min_bytes` each can fit in what is
 * left, before anything is allocated or looped over for them. */
static fg_err cur_count_fits(cursor *c, uint64_t count, uint64_t min_bytes, const char *what)
{
    if (min_bytes != 0 && count > cur_left(c) / min_bytes)
        return cur_fail(c, FG_ERR_GGUF_LIMIT,
                        "%s %" PRIu64 " needs at least %" PRIu64 " bytes per item but only %" PRIu64
                        " bytes are left at offset %" PRIu64 " (corrupt count or truncated file)",
                        what, count, min_bytes, cur_left(c), c->pos);
    return FG_OK;
}

/* Copies a name into the arena; names with NUL bytes are refused because the
 * API hands them out as C strings (two names equal up to a NUL would alias). */
static fg_err cur_name(fg_gguf_t *g, cursor *c, const uint8_t *s, uint64_t len, const char *what, uint64_t at,
                       const char **out)
{
    if (memchr(s, '\0', (size_t)len))
        return cur_fail(c, FG_ERR_GGUF_LIMIT, "%s at offset %" PRIu64 " contains a NUL byte", what, at);
    *out = arena_copy(g, s, len);
    if (!*out)
        return cur_fail(c, FG_ERR_NOMEM, "out of memory copying %s", what);
    return FG_OK;
}

/* ------------------------------------------------------------------ parse */

/* Validates one value of type t at the cursor and skips it. `kv` is the top
 * level entry to fill, NULL inside nested arrays. depth counts array levels. */
static fg_err parse_value(cursor *c, uint32_t t, unsigned depth, kv_entry *kv)
{
    fg_err e;
    uint32_t fixed = vtype_fixed_size(t);
    if (fixed) {
        if ((e = cur_need(c, fixed, vtype_name(t))))
            return e;
        if (kv)
            kv->val = c->base + c->pos;
        c->pos += fixed;
        return FG_OK;
    }
    if (t == FG_GGUF_STRING) {
        const uint8_t *s;
        uint64_t len;
        if ((e = cur_str(c, "string value", &s, &len)))
            return e;
        if (kv) {
            kv->val = s;
            kv->count = len;
        }
        return FG_OK;
    }
    /* ARRAY (the caller has rejected unknown types) */
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return cur_fail(c, FG_ERR_GGUF_LIMIT, "arrays nested deeper than %d levels at offset %" PRIu64,
                        GGUF_MAX_ARRAY_DEPTH, c->pos);
    uint64_t at = c->pos;
    uint32_t et;
    uint64_t count;
    if ((e = cur_u32(c, "array element type", &et)) || (e = cur_u64(c, "array count", &count)))
        return e;
    if (!vtype_known(et))
        return cur_fail(c, FG_ERR_GGUF_VALUE_TYPE, "array at offset %" PRIu64 " has unknown element type %" PRIu32,
                        at, et);
    if ((e = cur_count_fits(c, count, vtype_min_size(et), "array count")))
        return e;
    if (kv) {
        kv->elem_type = et;
        kv->count = count;
        kv->val = c->base + c->pos;
    }
    uint32_t efixed = vtype_fixed_size(et);
    if (efixed) {
        c->pos += count * efixed; /* fits: checked by cur_count_fits */
        return FG_OK;
    }
    if (et == FG_GGUF_STRING && kv && count) {
        kv->str_elems = malloc((size_t)count * sizeof *kv->str_elems);
        if (!kv->str_elems)
            return cur_fail(c, FG_ERR_NOMEM, "out of memory indexing %" PRIu64 " strings", count);
    }
    for (uint64_t i = 0; i < count; i++) {
        if (et == FG_GGUF_STRING) {
            const uint8_t *s;
            uint64_t len;
            uint64_t elem_at = c->pos;
            if ((e = cur_str(c, "array string", &s, &len)))
                return e;
            if (kv)
                kv->str_elems[i] = c->base + elem_at;
        } else if ((e = parse_value(c, FG_GGUF_ARRAY, depth + 1, NULL))) {
            return e;
        }
    }
    return FG_OK;
}

static fg_err parse_kv(fg_gguf_t *g, cursor *c, uint64_t i)
{
    kv_entry *kv = &g->kv[i];
    uint64_t at = c->pos;
    snprintf(c->where, sizeof c->where, "key #%" PRIu64 " at offset %" PRIu64, i, at);

    const uint8_t *s;
    uint64_t len;
    fg_err e = cur_str(c, "key name", &s, &len);
    if (e || (e = cur_name(g, c, s, len, "key name", at, &kv->name)))
        return e;
    cur_where(c, "key", s, len);

    uint32_t *slot = index_slot(g, &g->kv_index, kv_name_at, kv->name);
    if (*slot)
        return cur_fail(c, FG_ERR_GGUF_DUPLICATE, "duplicate key at offset %" PRIu64 " (first is key #%" PRIu32 ")",
                        at, *slot - 1);
    *slot = (uint32_t)i + 1;

    if ((e = cur_u32(c, "value type", &kv->type)))
        return e;
    if (!vtype_known(kv->type))
        return cur_fail(c, FG_ERR_GGUF_VALUE_TYPE, "unknown value type %" PRIu32 " at offset %" PRIu64, kv->type,
                        c->pos - 4);
    kv->raw = c->base + c->pos;
    if ((e = parse_value(c, kv->type, 0, kv)))
        return e;
    kv->raw_len = (uint64_t)(c->base + c->pos - kv->raw);

    if (strcmp(kv->name, "general.alignment") == 0) {
        if (kv->type != FG_GGUF_UINT32)
            return cur_fail(c, FG_ERR_GGUF_KEY_TYPE, "must be u32, is %s", vtype_name(kv->type));
        uint64_t a = load_le(kv->val, 4);
        if (a == 0 || (a & (a - 1)) != 0)
            return cur_fail(c, FG_ERR_GGUF_LIMIT, "alignment %" PRIu64 " is not a nonzero power of two", a);
        g->alignment = a;
    }
    return FG_OK;
}

static fg_err parse_tensor_info(fg_gguf_t *g, cursor *c, uint64_t i)
{
    fg_gguf_tensor *t = &g->tensors[i];
    uint64_t at = c->pos;
    snprintf(c->where, sizeof c->where, "tensor #%" PRIu64 " at offset %" PRIu64, i, at);

    const uint8_t *s;
    uint64_t len;
    fg_err e = cur_str(c, "tensor name", &s, &len);
    if (e || (e = cur_name(g, c, s, len, "tensor name", at, &t->name)))
        return e;
    cur_where(c, "tensor", s, len);

    uint32_t *slot = index_slot(g, &g->tensor_index, tensor_name_at, t->name);
    if (*slot)
        return cur_fail(c, FG_ERR_GGUF_DUPLICATE,
                        "duplicate tensor name at offset %" PRIu64 " (first is tensor #%" PRIu32 ")", at, *slot - 1);
    *slot = (uint32_t)i + 1;

    if ((e = cur_u32(c, "n_dims", &t->n_dims)))
        return e;
    if (t->n_dims < 1 || t->n_dims > FG_GGUF_MAX_DIMS)
        return cur_fail(c, FG_ERR_GGUF_LIMIT, "n_dims %" PRIu32 " at offset %" PRIu64 " outside 1..%d", t->n_dims,
                        c->pos - 4, FG_GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < FG_GGUF_MAX_DIMS; d++) {
        uint64_t v = 1;
        if (d < t->n_dims && (e = cur_u64(c, "tensor dimension", &v)))
            return e;
        /* Stored as u64 on disk; ggml reads int64 and so do we: a value with
         * the top bit set is negative and rejected by fg_ggml_tensor_bytes. */
        t->ne[d] = v > (uint64_t)INT64_MAX ? -(int64_t)(~v) - 1 : (int64_t)v;
    }
    if ((e = cur_u32(c, "tensor type", &t->type)) || (e = cur_u64(c, "tensor offset", &t->offset)))
        return e;

    fg_diag shape;
    e = fg_ggml_tensor_bytes(t->type, t->n_dims, t->ne, &t->nbytes, &shape);
    if (e)
        return cur_fail(c, e, "%s (info at offset %" PRIu64 ")", shape.msg, at);
    return FG_OK;
}

/* Data ranges are checked after every info is read, since the data section
 * starts after the last one. */
static fg_err check_tensor_data(fg_gguf_t *g, cursor *c, uint64_t i)
{
    fg_gguf_tensor *t = &g->tensors[i];
    cur_where(c, "tensor", (const uint8_t *)t->name, strlen(t->name));
    if (t->offset % g->alignment != 0)
        return cur_fail(c, FG_ERR_GGUF_BOUNDS, "data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                        t->offset, g->alignment);
    uint64_t room = g->size >= g->data_offset ? g->size - g->data_offset : 0;
    if (g->size < g->data_offset || t->offset > room || t->nbytes > room - t->offset)
        return cur_fail(c, FG_ERR_GGUF_BOUNDS,
                        "data [%" PRIu64 ", +%" PRIu64 ") relative to the data section at file offset %" PRIu64
                        " lies outside the %" PRIu64 "-byte file",
                        t->offset, t->nbytes, g->data_offset, g->size);
    t->data = g->base + g->data_offset + t->offset;
    return FG_OK;
}

static fg_err parse(fg_gguf_t *g, fg_diag *diag)
{
    cursor c = {.base = g->base, .size = g->size, .pos = 0, .diag = diag, .where = ""};
    fg_err e;

    /* Say "not GGUF" for any file whose first bytes disagree, even a short one. */
    uint64_t m = g->size < 4 ? g->size : 4;
    if (memcmp(g->base, "GGUF", (size_t)m) != 0)
        return cur_fail(&c, FG_ERR_GGUF_MAGIC, "bad magic (not a GGUF file)");
    if ((e = cur_need(&c, 4, "magic")))
        return e;
    c.pos = 4;

    if ((e = cur_u32(&c, "version", &g->version)))
        return e;
    if (g->version != 2 && g->version != 3) {
        uint32_t v = g->version;
        uint32_t swapped = (v >> 24) | ((v >> 8) & 0xff00) | ((v << 8) & 0xff0000) | (v << 24);
        return cur_fail(&c, FG_ERR_GGUF_VERSION, "version %" PRIu32 " not supported (need 2 or 3)%s", v,
                        swapped == 2 || swapped == 3 ? "; this looks like a big-endian GGUF" : "");
    }

    if ((e = cur_u64(&c, "tensor count", &g->n_tensors)) || (e = cur_u64(&c, "key count", &g->n_kv)))
        return e;
    if (g->n_tensors > FG_GGUF_MAX_TENSORS)
        return cur_fail(&c, FG_ERR_GGUF_LIMIT, "tensor count %" PRIu64 " exceeds the limit %u", g->n_tensors,
                        FG_GGUF_MAX_TENSORS);
    if (g->n_kv > FG_GGUF_MAX_KEYS)
        return cur_fail(&c, FG_ERR_GGUF_LIMIT, "key count %" PRIu64 " exceeds the limit %u", g->n_kv,
                        FG_GGUF_MAX_KEYS);
    /* Both counts are <= 2^20, so the sum of their minimum sizes cannot overflow. */
    uint64_t min_dir = g->n_kv * GGUF_MIN_KV_BYTES + g->n_tensors * GGUF_MIN_TENSOR_BYTES;
    if (min_dir > cur_left(&c))
        return cur_fail(&c, FG_ERR_GGUF_LIMIT,
                        "%" PRIu64 " keys and %" PRIu64 " tensors need at least %" PRIu64 " bytes but only %" PRIu64
                        " follow the header (corrupt counts or truncated file)",
                        g->n_kv, g->n_tensors, min_dir, cur_left(&c));

    g->kv = calloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors || index_init(&g->kv_index, g->n_kv) || index_init(&g->tensor_index, g->n_tensors))
        return cur_fail(&c, FG_ERR_NOMEM, "out of memory for %" PRIu64 " keys and %" PRIu64 " tensors", g->n_kv,
                        g->n_tensors);

    g->alignment = FG_GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < g->n_kv; i++)
        if ((e = parse_kv(g, &c, i)))
            return e;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((e = parse_tensor_info(g, &c, i)))
            return e;

    c.where[0] = '\0';
    if (c.pos > UINT64_MAX - (g->alignment - 1))
        return cur_fail(&c, FG_ERR_GGUF_BOUNDS, "data section offset overflows");
    g->data_offset = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((e = check_tensor_data(g, &c, i)))
            return e;
    return FG_OK;
}

/* ------------------------------------------------------------- open/close */

/* Base pointer for an empty input: arithmetic on NULL is undefined even with 0. */
static const uint8_t empty_file[1];

static fg_err open_common(const uint8_t *base, uint64_t size, bool mapped, fg_gguf_t **out, fg_diag *diag)
{
    fg_gguf_t *g = calloc(1, sizeof *g);
    if (!g)
        return fg_diag_set(diag, FG_ERR_NOMEM, "gguf: out of memory");
    g->base = base;
    g->size = size;
    g->mapped = mapped;
    g->hash_seed = fg_random_seed();
    fg_err e = parse(g, diag);
    if (e) {
        g->mapped = false; /* the caller still owns the mapping on failure */
        fg_gguf_close(g);
        return e;
    }
    *out = g;
    return FG_OK;
}

fg_err fg_gguf_open_memory(const void *data, size_t size, fg_gguf_t **out, fg_diag *diag)
{
    if (!out || (!data && size))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "gguf: NULL buffer or out pointer");
    *out = NULL;
    return open_common(size ? data : empty_file, size, false, out, diag);
}

fg_err fg_gguf_open_file(const char *path, fg_gguf_t **out, fg_diag *diag)
{
    if (!path || !out)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "gguf: NULL path or out pointer");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fg_diag_set(diag, FG_ERR_IO, "gguf: open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        fg_err e = fg_diag_set(diag, FG_ERR_IO, "gguf: stat %s: %s", path, strerror(errno));
        close(fd);
        return e;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return fg_diag_set(diag, FG_ERR_IO, "gguf: %s is not a regular file", path);
    }
    uint64_t size = (uint64_t)st.st_size;
    const uint8_t *base = empty_file;
    if (size) { /* mmap of length 0 fails; an empty file is reported as truncated */
        void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            fg_err e = fg_diag_set(diag, FG_ERR_IO, "gguf: mmap %s: %s", path, strerror(errno));
            close(fd);
            return e;
        }
        base = p;
    }
    close(fd); /* the mapping keeps the file alive */
    fg_err e = open_common(base, size, size != 0, out, diag);
    if (e && size)
        munmap((void *)(uintptr_t)base, (size_t)size);
    if (e && diag) {
        /* prefix the path so a log line says which file */
        char msg[sizeof diag->msg];
        snprintf(msg, sizeof msg, "%s", diag->msg);
        fg_diag_set(diag, e, "%s: %s", path, msg);
    }
    return e;
}

void fg_gguf_close(fg_gguf_t *g)
{
    if (!g)
        return;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++)
            free(g->kv[i].str_elems);
    free(g->kv);
    free(g->tensors);
    free(g->kv_index.slots);
    free(g->tensor_index.slots);
    while (g->names) {
        name_block *next = g->names->next;
        free(g->names);
        g->names = next;
    }
    if (g->mapped)
        munmap((void *)(uintptr_t)g->base, (size_t)g->size);
    free(g);
}

/* --------------------------------------------------------------- accessors */

uint32_t fg_gguf_version(const fg_gguf_t *g)
{
    return g->version;
}

uint64_t fg_gguf_alignment(const fg_gguf_t *g)
{
    return g->alignment;
}

uint64_t fg_gguf_data_offset(const fg_gguf_t *g)
{
    return g->data_offset;
}

uint64_t fg_gguf_file_size(const fg_gguf_t *g)
{
    return g->size;
}

const void *fg_gguf_file_bytes(const fg_gguf_t *g)
{
    return g->base;
}

bool fg_gguf_is_file_mapping(const fg_gguf_t *g)
{
    return g->mapped;
}

uint64_t fg_gguf_key_count(const fg_gguf_t *g)
{
    return g->n_kv;
}

int64_t fg_gguf_find_key(const fg_gguf_t *g, const char *key)
{
    return g ? index_find(g, &g->kv_index, kv_name_at, key) : -1;
}

const char *fg_gguf_key_name(const fg_gguf_t *g, uint64_t i)
{
    return i < g->n_kv ? g->kv[i].name : NULL;
}

fg_gguf_vtype fg_gguf_key_type(const fg_gguf_t *g, uint64_t i)
{
    return i < g->n_kv ? (fg_gguf_vtype)g->kv[i].type : FG_GGUF_INVALID;
}

const void *fg_gguf_key_raw(const fg_gguf_t *g, uint64_t i, uint64_t *len)
{
    if (i >= g->n_kv)
        return NULL;
    *len = g->kv[i].raw_len;
    return g->kv[i].raw;
}

/* The entry for key, or NULL with *e set (NOT_FOUND / INVALID_ARG). */
static const kv_entry *get_kv(const fg_gguf_t *g, const char *key, const void *out, fg_err *e)
{
    if (!g || !key || !out) {
        *e = FG_ERR_INVALID_ARG;
        return NULL;
    }
    int64_t i = index_find(g, &g->kv_index, kv_name_at, key);
    if (i < 0) {
        *e = FG_ERR_NOT_FOUND;
        return NULL;
    }
    return &g->kv[i];
}

fg_err fg_gguf_get_i64(const fg_gguf_t *g, const char *key, int64_t *out)
{
    fg_err e;
    const kv_entry *kv = get_kv(g, key, out, &e);
    if (!kv)
        return e;
    if (!vtype_is_int(kv->type))
        return FG_ERR_GGUF_KEY_TYPE;
    return int_to_i64(load_int(kv->type, kv->val), out);
}

fg_err fg_gguf_get_u32(const fg_gguf_t *g, const char *key, uint32_t *out)
{
    fg_err e;
    const kv_entry *kv = get_kv(g, key, out, &e);
    if (!kv)
        return e;
    if (!vtype_is_int(kv->type))
        return FG_ERR_GGUF_KEY_TYPE;
    int_value v = load_int(kv->type, kv->val);
    if (v.neg || v.u > UINT32_MAX)
        return FG_ERR_GGUF_KEY_TYPE;
    *out = (uint32_t)v.u;
    return FG_OK;
}

fg_err fg_gguf_get_f32(const fg_gguf_t *g, const char *key, float *out)
{
    fg_err e;
    const kv_entry *kv = get_kv(g, key, out, &e);
    if (!kv)
        return e;
    if (kv->type == FG_GGUF_FLOAT32) {
        uint32_t bits = (uint32_t)load_le(kv->val, 4);
        memcpy(out, &bits, 4);
        return FG_OK;
    }
    if (kv->type == FG_GGUF_FLOAT64) {
        uint64_t bits = load_le(kv->val, 8);
        double d;
        memcpy(&d, &bits, 8);
        /* converting a finite double outside float's range is undefined */
        if (isfinite(d) && fabs(d) > FLT_MAX)
            return FG_ERR_GGUF_KEY_TYPE;
        *out = (float)d;
        return FG_OK;
    }
    return FG_ERR_GGUF_KEY_TYPE;
}

fg_err fg_gguf_get_bool(const fg_gguf_t *g, const char *key, bool *out)
{
    fg_err e;
    const kv_entry *kv = get_kv(g, key, out, &e);
    if (!kv)
        return e;
    if (kv->type != FG_GGUF_BOOL)
        return FG_ERR_GGUF_KEY_TYPE;
    *out = kv->val[0] != 0;
    return FG_OK;
}

fg_err fg_gguf_get_str(const fg_gguf_t *g, const char *key, fg_gguf_str *out)
{
    fg_err e;
    const kv_entry *kv = get_kv(g, key, out, &e);
    if (!kv)
        return e;
    if (kv->type != FG_GGUF_STRING)
        return FG_ERR_GGUF_KEY_TYPE;
    out->ptr = (const char *)kv->val;
    out->len = kv->count;
    return FG_OK;
}

fg_err fg_gguf_get_arr(const fg_gguf_t *g, const char *key, fg_gguf_vtype *elem_type, uint64_t *count)
{
    fg_err e;
    const kv_entry *kv = get_kv(g, key, elem_type, &e);
    if (!kv)
        return e;
    if (!count)
        return FG_ERR_INVALID_ARG;
    if (kv->type != FG_GGUF_ARRAY)
        return FG_ERR_GGUF_KEY_TYPE;
    *elem_type = (fg_gguf_vtype)kv->elem_type;
    *count = kv->count;
    return FG_OK;
}

fg_err fg_gguf_get_arr_str(const fg_gguf_t *g, const char *key, uint64_t i, fg_gguf_str *out)
{
    fg_err e;
    const kv_entry *kv = get_kv(g, key, out, &e);
    if (!kv)
        return e;
    if (kv->type != FG_GGUF_ARRAY || kv->elem_type != FG_GGUF_STRING)
        return FG_ERR_GGUF_KEY_TYPE;
    if (i >= kv->count)
        return FG_ERR_INVALID_ARG;
    const uint8_t *p = kv->str_elems[i];
    out->len = load_le(p, 8);
    out->ptr = (const char *)p + 8;
    return FG_OK;
}

fg_err fg_gguf_get_arr_data(const fg_gguf_t *g, const char *key, const void **data)
{
    fg_err e;
    const kv_entry *kv = get_kv(g, key, data, &e);
    if (!kv)
        return e;
    if (kv->type != FG_GGUF_ARRAY || !vtype_fixed_size(kv->elem_type))
        return FG_ERR_GGUF_KEY_TYPE;
    *data = kv->val;
    return FG_OK;
}

fg_err fg_gguf_get_arr_i64(const fg_gguf_t *g, const char *key, uint64_t i, int64_t *out)
{
    fg_err e;
    const kv_entry *kv = get_kv(g, key, out, &e);
    if (!kv)
        return e;
    if (kv->type != FG_GGUF_ARRAY || !vtype_is_int(kv->elem_type))
        return FG_ERR_GGUF_KEY_TYPE;
    if (i >= kv->count)
        return FG_ERR_INVALID_ARG;
    return int_to_i64(load_int(kv->elem_type, kv->val + i * vtype_fixed_size(kv->elem_type)), out);
}

uint64_t fg_gguf_tensor_count(const fg_gguf_t *g)
{
    return g->n_tensors;
}

const fg_gguf_tensor *fg_gguf_tensor_at(const fg_gguf_t *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const fg_gguf_tensor *fg_gguf_find_tensor(const fg_gguf_t *g, const char *name)
{
    if (!g)
        return NULL;
    int64_t i = index_find(g, &g->tensor_index, tensor_name_at, name);
    return i < 0 ? NULL : &g->tensors[i];
}

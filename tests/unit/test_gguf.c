/* test_gguf.c: the GGUF reader and writer.
 *
 * 1. Round trip through the writer and fg_gguf_open_file: every key type the
 *    writer has, tensors of several types, data pointers, offsets, a custom
 *    alignment.
 * 2. A hand-built v2 file (raw bytes) with every metadata type, numeric arrays
 *    of each width and nested arrays, and the getters' conversion rules.
 * 3. A table of malformed files, each expecting one exact fg_err and a message.
 * 4. Every prefix of two small valid files: each must fail cleanly. Inputs are
 *    copied into heap buffers of exactly their length so that ASan sees any
 *    read past the end.
 *
 * Files live in a mkdtemp directory under /tmp, removed at the end.
 */
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "tests/unit/fg_test.h"
#include "tests/unit/fg_test_files.h"

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* ------------------------------------------------------------ raw builder */

typedef struct rb {
    uint8_t *p;
    size_t len, cap;
} rb;

static void rb_bytes(rb *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void rb_le(rb *b, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        rb_bytes(b, &c, 1);
    }
}

static void rb_u32(rb *b, uint32_t v) { rb_le(b, v, 4); }
static void rb_u64(rb *b, uint64_t v) { rb_le(b, v, 8); }

static void rb_str(rb *b, const char *s)
{
    rb_u64(b, strlen(s));
    rb_bytes(b, s, strlen(s));
}

static void rb_header(rb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    rb_bytes(b, "GGUF", 4);
    rb_u32(b, version);
    rb_u64(b, n_tensors);
    rb_u64(b, n_kv);
}

static void rb_key(rb *b, const char *name, uint32_t type)
{
    rb_str(b, name);
    rb_u32(b, type);
}

static void rb_f32(rb *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    rb_u32(b, u);
}

static void rb_f64(rb *b, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    rb_u64(b, u);
}

static void rb_tensor(rb *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type, uint64_t offset)
{
    rb_str(b, name);
    rb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        rb_u64(b, (uint64_t)ne[i]);
    rb_u32(b, type);
    rb_u64(b, offset);
}

static void rb_pad(rb *b, size_t align)
{
    while (b->len % align)
        rb_le(b, 0, 1);
}

/* A file with no keys and one tensor, then `data` zero bytes of data. */
static void rb_one_tensor(rb *b, uint32_t n_dims, const int64_t *ne, uint32_t type, uint64_t offset, size_t data)
{
    rb_header(b, 3, 1, 0);
    rb_tensor(b, "w", n_dims, ne, type, offset);
    rb_pad(b, 32);
    for (size_t i = 0; i < data; i++)
        rb_le(b, 0, 1);
}

/* Opens a heap copy of exactly n bytes (ASan sees any overread). On success the
 * copy is returned in *copy and must be freed after fg_gguf_close. */
static fg_err open_exact(const uint8_t *p, size_t n, fg_gguf_t **g, uint8_t **copy, fg_diag *d)
{
    *copy = malloc(n ? n : 1);
    if (!*copy)
        abort();
    if (n)
        memcpy(*copy, p, n);
    fg_err e = fg_gguf_open_memory(*copy, n, g, d);
    if (e) {
        free(*copy);
        *copy = NULL;
    }
    return e;
}

static void expect_open(const char *name, const rb *b, fg_err want)
{
    fg_gguf_t *g = (fg_gguf_t *)1;
    uint8_t *copy;
    fg_diag d = {{0}};
    fg_err e = open_exact(b->p, b->len, &g, &copy, &d);
    CHECK_MSG(e == want, "%s: got %s, want %s (%s)", name, fg_err_name(e), fg_err_name(want), d.msg);
    CHECK_MSG((d.msg[0] != '\0') == (want != FG_OK), "%s: diag \"%s\"", name, d.msg);
    CHECK_MSG((g == NULL) == (e != FG_OK), "%s: out pointer", name);
    if (e == FG_OK) {
        fg_gguf_close(g);
        free(copy);
    }
    fprintf(stderr, "  %-28s %-22s %s\n", name, fg_err_name(e), d.msg);
}

/* ------------------------------------------------------------ round trip */

typedef struct tensor_case {
    const char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t nbytes;
} tensor_case;

static const tensor_case rt_tensors[] = {
    {"t.f32", FG_GGML_F32, 2, {3, 2}, 24},
    {"t.f16", FG_GGML_F16, 1, {5}, 10},
    {"t.q8_0", FG_GGML_Q8_0, 2, {64, 2}, 4 * 34},
    {"t.bf16", FG_GGML_BF16, 4, {2, 2, 2, 2}, 32},
    {"t.q4_K", 12, 1, {256}, 144},
    {"t.empty", FG_GGML_F32, 2, {0, 3}, 0},
};
#define N_RT (sizeof rt_tensors / sizeof rt_tensors[0])

static uint8_t rt_byte(size_t t, uint64_t i)
{
    return (uint8_t)(i * 7 + t * 31 + 1);
}

static void test_round_trip(void)
{
    char path[128];
    fg_test_path(path, sizeof path, "rt.gguf");
    fg_gguf_writer_t *w;
    fg_diag d = {{0}};
    CHECK(fg_gguf_writer_create(path, 64, &w, &d) == FG_OK);
    if (!w)
        return;
    const char *strs[] = {"alpha", "", "nul\0inside"};
    const uint64_t lens[] = {5, 0, 10};
    const int32_t ints[] = {1, -2, INT32_MAX, INT32_MIN};
    const float flts[] = {0.5f, -1.25f, 3e38f};
    CHECK(fg_gguf_writer_add_str(w, "general.architecture", "deepseek2") == FG_OK);
    CHECK(fg_gguf_writer_add_u32(w, "general.alignment", 64) == FG_OK);
    CHECK(fg_gguf_writer_add_u32(w, "k.u32", 4000000000u) == FG_OK);
    CHECK(fg_gguf_writer_add_i32(w, "k.i32", -5) == FG_OK);
    CHECK(fg_gguf_writer_add_u64(w, "k.u64", (uint64_t)1 << 40) == FG_OK);
    CHECK(fg_gguf_writer_add_f32(w, "k.f32", 1.5f) == FG_OK);
    CHECK(fg_gguf_writer_add_bool(w, "k.bool", true) == FG_OK);
    CHECK(fg_gguf_writer_add_str(w, "k.empty", "") == FG_OK);
    CHECK(fg_gguf_writer_add_arr_str(w, "k.strs", strs, lens, 3) == FG_OK);
    CHECK(fg_gguf_writer_add_arr_str(w, "k.strs0", strs, NULL, 2) == FG_OK);
    CHECK(fg_gguf_writer_add_arr_i32(w, "k.ints", ints, 4) == FG_OK);
    CHECK(fg_gguf_writer_add_arr_f32(w, "k.flts", flts, 3) == FG_OK);
    CHECK(fg_gguf_writer_add_arr_i32(w, "k.none", NULL, 0) == FG_OK);
    for (size_t t = 0; t < N_RT; t++)
        CHECK(fg_gguf_writer_add_tensor(w, rt_tensors[t].name, rt_tensors[t].type, rt_tensors[t].n_dims,
                                        rt_tensors[t].ne) == FG_OK);
    CHECK(fg_gguf_writer_begin_data(w, &d) == FG_OK);
    CHECK(fg_gguf_writer_add_u32(w, "too.late", 1) == FG_ERR_INVALID_ARG);
    for (size_t t = 0; t < N_RT; t++) {
        uint8_t buf[512];
        for (uint64_t i = 0; i < rt_tensors[t].nbytes; i++)
            buf[i] = rt_byte(t, i);
        CHECK_MSG(fg_gguf_writer_write_tensor(w, buf, rt_tensors[t].nbytes, &d) == FG_OK, "%s", d.msg);
    }
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(file_exists(tmp) && !file_exists(path));
    CHECK_MSG(fg_gguf_writer_finish(w, &d) == FG_OK, "%s", d.msg);
    fg_gguf_writer_destroy(w);
    CHECK(!file_exists(tmp) && file_exists(path));

    fg_gguf_t *g = NULL;
    fg_err e = fg_gguf_open_file(path, &g, &d);
    CHECK_MSG(e == FG_OK, "%s", d.msg);
    if (!g)
        return;
    CHECK(fg_gguf_version(g) == 3);
    CHECK(fg_gguf_alignment(g) == 64);
    CHECK(fg_gguf_data_offset(g) % 64 == 0);
    CHECK(fg_gguf_key_count(g) == 13);
    CHECK(fg_gguf_find_key(g, "general.architecture") == 0);
    CHECK(fg_gguf_find_key(g, "k.none") == 12);
    CHECK(fg_gguf_find_key(g, "k.missing") == -1);
    CHECK(strcmp(fg_gguf_key_name(g, 2), "k.u32") == 0);
    CHECK(fg_gguf_key_type(g, 2) == FG_GGUF_UINT32);
    CHECK(fg_gguf_key_type(g, 8) == FG_GGUF_ARRAY);
    CHECK(fg_gguf_key_name(g, 13) == NULL);
    CHECK(fg_gguf_key_type(g, 13) == FG_GGUF_INVALID);

    fg_gguf_str s;
    CHECK(fg_gguf_get_str(g, "general.architecture", &s) == FG_OK && s.len == 9 && !memcmp(s.ptr, "deepseek2", 9));
    CHECK(fg_gguf_get_str(g, "k.empty", &s) == FG_OK && s.len == 0);
    uint32_t u32;
    int64_t i64;
    float f;
    bool bo;
    CHECK(fg_gguf_get_u32(g, "k.u32", &u32) == FG_OK && u32 == 4000000000u);
    CHECK(fg_gguf_get_i64(g, "k.u32", &i64) == FG_OK && i64 == 4000000000);
    CHECK(fg_gguf_get_i64(g, "k.i32", &i64) == FG_OK && i64 == -5);
    CHECK(fg_gguf_get_u32(g, "k.i32", &u32) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_i64(g, "k.u64", &i64) == FG_OK && i64 == (int64_t)1 << 40);
    CHECK(fg_gguf_get_u32(g, "k.u64", &u32) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_f32(g, "k.f32", &f) == FG_OK && f == 1.5f);
    CHECK(fg_gguf_get_bool(g, "k.bool", &bo) == FG_OK && bo);

    fg_gguf_vtype et;
    uint64_t n;
    CHECK(fg_gguf_get_arr(g, "k.strs", &et, &n) == FG_OK && et == FG_GGUF_STRING && n == 3);
    for (uint64_t i = 0; i < 3; i++)
        CHECK(fg_gguf_get_arr_str(g, "k.strs", i, &s) == FG_OK && s.len == lens[i] && !memcmp(s.ptr, strs[i], lens[i]));
    CHECK(fg_gguf_get_arr_str(g, "k.strs", 3, &s) == FG_ERR_INVALID_ARG);
    CHECK(fg_gguf_get_arr_str(g, "k.strs0", 0, &s) == FG_OK && s.len == 5);
    CHECK(fg_gguf_get_arr(g, "k.ints", &et, &n) == FG_OK && et == FG_GGUF_INT32 && n == 4);
    for (uint64_t i = 0; i < 4; i++)
        CHECK(fg_gguf_get_arr_i64(g, "k.ints", i, &i64) == FG_OK && i64 == ints[i]);
    const void *data;
    CHECK(fg_gguf_get_arr_data(g, "k.flts", &data) == FG_OK);
    for (int i = 0; i < 3; i++) {
        float v;
        memcpy(&v, (const char *)data + 4 * i, 4);
        CHECK(v == flts[i]);
    }
    CHECK(fg_gguf_get_arr(g, "k.none", &et, &n) == FG_OK && et == FG_GGUF_INT32 && n == 0);
    CHECK(fg_gguf_get_arr_i64(g, "k.none", 0, &i64) == FG_ERR_INVALID_ARG);

    CHECK(fg_gguf_tensor_count(g) == N_RT);
    const uint8_t *base = fg_gguf_file_bytes(g);
    uint64_t end = 0;
    for (size_t t = 0; t < N_RT; t++) {
        const tensor_case *c = &rt_tensors[t];
        const fg_gguf_tensor *ti = fg_gguf_find_tensor(g, c->name);
        CHECK_MSG(ti && ti == fg_gguf_tensor_at(g, t), "%s", c->name);
        if (!ti)
            continue;
        CHECK(strcmp(ti->name, c->name) == 0);
        CHECK(ti->type == c->type && ti->n_dims == c->n_dims);
        for (uint32_t k = 0; k < 4; k++)
            CHECK(ti->ne[k] == (k < c->n_dims ? c->ne[k] : 1));
        CHECK_MSG(ti->nbytes == c->nbytes, "%s: %" PRIu64, c->name, ti->nbytes);
        CHECK(ti->offset % 64 == 0);
        CHECK(ti->offset >= end); /* in order, no overlap */
        CHECK((const uint8_t *)ti->data == base + fg_gguf_data_offset(g) + ti->offset);
        for (uint64_t i = 0; i < ti->nbytes; i++)
            if (((const uint8_t *)ti->data)[i] != rt_byte(t, i)) {
                CHECK_MSG(0, "%s: data byte %" PRIu64, c->name, i);
                break;
            }
        end = ti->offset + (ti->nbytes + 63) / 64 * 64;
    }
    CHECK(fg_gguf_file_size(g) == fg_gguf_data_offset(g) + end);
    CHECK(fg_gguf_find_tensor(g, "t.missing") == NULL);
    CHECK(fg_gguf_tensor_at(g, N_RT) == NULL);
    fg_gguf_close(g);
    unlink(path);
}

/* ------------------------------------------------ every type, getter rules */

static void build_all_types(rb *b, uint32_t version)
{
    rb_header(b, version, 0, 21);
    rb_key(b, "u8", FG_GGUF_UINT8), rb_le(b, 200, 1);
    rb_key(b, "i8", FG_GGUF_INT8), rb_le(b, (uint8_t)-100, 1);
    rb_key(b, "u16", FG_GGUF_UINT16), rb_le(b, 60000, 2);
    rb_key(b, "i16", FG_GGUF_INT16), rb_le(b, (uint16_t)-30000, 2);
    rb_key(b, "u32", FG_GGUF_UINT32), rb_u32(b, 4000000000u);
    rb_key(b, "i32", FG_GGUF_INT32), rb_u32(b, (uint32_t)-2000000000);
    rb_key(b, "f32", FG_GGUF_FLOAT32), rb_f32(b, 2.5f);
    rb_key(b, "bool", FG_GGUF_BOOL), rb_le(b, 1, 1);
    rb_key(b, "str", FG_GGUF_STRING), rb_str(b, "hello");
    rb_key(b, "u64", FG_GGUF_UINT64), rb_u64(b, UINT64_MAX);
    rb_key(b, "i64", FG_GGUF_INT64), rb_u64(b, (uint64_t)INT64_MIN);
    rb_key(b, "f64", FG_GGUF_FLOAT64), rb_f64(b, 0.25);
    rb_key(b, "f64.big", FG_GGUF_FLOAT64), rb_f64(b, 1e300);
    rb_key(b, "a.u8", FG_GGUF_ARRAY), rb_u32(b, FG_GGUF_UINT8), rb_u64(b, 3), rb_bytes(b, "\x01\x02\xff", 3);
    rb_key(b, "a.i16", FG_GGUF_ARRAY), rb_u32(b, FG_GGUF_INT16), rb_u64(b, 2), rb_le(b, 0xffff, 2), rb_le(b, 7, 2);
    rb_key(b, "a.u64", FG_GGUF_ARRAY), rb_u32(b, FG_GGUF_UINT64), rb_u64(b, 2), rb_u64(b, UINT64_MAX), rb_u64(b, 5);
    rb_key(b, "a.f64", FG_GGUF_ARRAY), rb_u32(b, FG_GGUF_FLOAT64), rb_u64(b, 1), rb_f64(b, -0.5);
    rb_key(b, "a.bool", FG_GGUF_ARRAY), rb_u32(b, FG_GGUF_BOOL), rb_u64(b, 2), rb_bytes(b, "\x00\x01", 2);
    /* [[1, 2], [3]] */
    rb_key(b, "a.nested", FG_GGUF_ARRAY), rb_u32(b, FG_GGUF_ARRAY), rb_u64(b, 2);
    rb_u32(b, FG_GGUF_INT32), rb_u64(b, 2), rb_u32(b, 1), rb_u32(b, 2);
    rb_u32(b, FG_GGUF_INT32), rb_u64(b, 1), rb_u32(b, 3);
    /* [["x"], ["y", "z"]] */
    rb_key(b, "a.nested_str", FG_GGUF_ARRAY), rb_u32(b, FG_GGUF_ARRAY), rb_u64(b, 2);
    rb_u32(b, FG_GGUF_STRING), rb_u64(b, 1), rb_str(b, "x");
    rb_u32(b, FG_GGUF_STRING), rb_u64(b, 2), rb_str(b, "y"), rb_str(b, "z");
    /* [[[]]] : three levels */
    rb_key(b, "a.deep", FG_GGUF_ARRAY), rb_u32(b, FG_GGUF_ARRAY), rb_u64(b, 1);
    rb_u32(b, FG_GGUF_ARRAY), rb_u64(b, 1), rb_u32(b, FG_GGUF_FLOAT32), rb_u64(b, 0);
}

static void test_all_types(void)
{
    rb b = {0};
    build_all_types(&b, 2);
    fg_gguf_t *g = NULL;
    uint8_t *copy;
    fg_diag d = {{0}};
    fg_err e = open_exact(b.p, b.len, &g, &copy, &d);
    CHECK_MSG(e == FG_OK, "%s", d.msg);
    if (e) {
        free(b.p);
        return;
    }
    CHECK(fg_gguf_version(g) == 2);
    CHECK(fg_gguf_alignment(g) == FG_GGUF_DEFAULT_ALIGNMENT);
    CHECK(fg_gguf_key_count(g) == 21 && fg_gguf_tensor_count(g) == 0);
    static const fg_gguf_vtype types[] = {FG_GGUF_UINT8,  FG_GGUF_INT8,    FG_GGUF_UINT16,  FG_GGUF_INT16,
                                          FG_GGUF_UINT32, FG_GGUF_INT32,   FG_GGUF_FLOAT32, FG_GGUF_BOOL,
                                          FG_GGUF_STRING, FG_GGUF_UINT64,  FG_GGUF_INT64,   FG_GGUF_FLOAT64,
                                          FG_GGUF_FLOAT64};
    for (uint64_t i = 0; i < sizeof types / sizeof types[0]; i++)
        CHECK_MSG(fg_gguf_key_type(g, i) == types[i], "key %" PRIu64, i);

    uint32_t u32;
    int64_t i64;
    float f;
    bool bo;
    fg_gguf_str s;
    /* integers convert when the value fits */
    CHECK(fg_gguf_get_u32(g, "u8", &u32) == FG_OK && u32 == 200);
    CHECK(fg_gguf_get_i64(g, "i8", &i64) == FG_OK && i64 == -100);
    CHECK(fg_gguf_get_u32(g, "i8", &u32) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_u32(g, "u16", &u32) == FG_OK && u32 == 60000);
    CHECK(fg_gguf_get_i64(g, "i16", &i64) == FG_OK && i64 == -30000);
    CHECK(fg_gguf_get_u32(g, "u32", &u32) == FG_OK && u32 == 4000000000u);
    CHECK(fg_gguf_get_i64(g, "i32", &i64) == FG_OK && i64 == -2000000000);
    CHECK(fg_gguf_get_i64(g, "u64", &i64) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_u32(g, "u64", &u32) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_i64(g, "i64", &i64) == FG_OK && i64 == INT64_MIN);
    /* floats: f32 and f64 only, and only in float range */
    CHECK(fg_gguf_get_f32(g, "f32", &f) == FG_OK && f == 2.5f);
    CHECK(fg_gguf_get_f32(g, "f64", &f) == FG_OK && f == 0.25f);
    CHECK(fg_gguf_get_f32(g, "f64.big", &f) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_f32(g, "u32", &f) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_i64(g, "f32", &i64) == FG_ERR_GGUF_KEY_TYPE);
    /* bool is only a bool */
    CHECK(fg_gguf_get_bool(g, "bool", &bo) == FG_OK && bo);
    CHECK(fg_gguf_get_bool(g, "u8", &bo) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_u32(g, "bool", &u32) == FG_ERR_GGUF_KEY_TYPE);
    /* strings */
    CHECK(fg_gguf_get_str(g, "str", &s) == FG_OK && s.len == 5 && !memcmp(s.ptr, "hello", 5));
    CHECK(fg_gguf_get_str(g, "u8", &s) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_u32(g, "str", &u32) == FG_ERR_GGUF_KEY_TYPE);
    /* absent keys and bad arguments */
    CHECK(fg_gguf_get_u32(g, "nope", &u32) == FG_ERR_NOT_FOUND);
    CHECK(fg_gguf_get_str(g, "nope", &s) == FG_ERR_NOT_FOUND);
    CHECK(fg_gguf_get_u32(g, NULL, &u32) == FG_ERR_INVALID_ARG);
    CHECK(fg_gguf_get_u32(g, "u8", NULL) == FG_ERR_INVALID_ARG);
    CHECK(fg_gguf_find_key(g, NULL) == -1);

    /* arrays */
    fg_gguf_vtype et;
    uint64_t n;
    const void *data;
    CHECK(fg_gguf_get_arr(g, "u8", &et, &n) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_arr(g, "a.u8", &et, &n) == FG_OK && et == FG_GGUF_UINT8 && n == 3);
    CHECK(fg_gguf_get_arr_i64(g, "a.u8", 2, &i64) == FG_OK && i64 == 255);
    CHECK(fg_gguf_get_arr_i64(g, "a.i16", 0, &i64) == FG_OK && i64 == -1);
    CHECK(fg_gguf_get_arr_i64(g, "a.i16", 1, &i64) == FG_OK && i64 == 7);
    CHECK(fg_gguf_get_arr_i64(g, "a.u64", 0, &i64) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_arr_i64(g, "a.u64", 1, &i64) == FG_OK && i64 == 5);
    CHECK(fg_gguf_get_arr_i64(g, "a.f64", 0, &i64) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_arr_data(g, "a.f64", &data) == FG_OK);
    double dv;
    memcpy(&dv, data, 8);
    CHECK(dv == -0.5);
    CHECK(fg_gguf_get_arr_data(g, "a.bool", &data) == FG_OK && ((const uint8_t *)data)[1] == 1);
    CHECK(fg_gguf_get_arr_str(g, "a.u8", 0, &s) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_arr_data(g, "str", &data) == FG_ERR_GGUF_KEY_TYPE);
    /* nested: visible as arrays of arrays, not element-wise */
    CHECK(fg_gguf_get_arr(g, "a.nested", &et, &n) == FG_OK && et == FG_GGUF_ARRAY && n == 2);
    CHECK(fg_gguf_get_arr_data(g, "a.nested", &data) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_arr_i64(g, "a.nested", 0, &i64) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_arr_str(g, "a.nested_str", 0, &s) == FG_ERR_GGUF_KEY_TYPE);
    CHECK(fg_gguf_get_arr(g, "a.deep", &et, &n) == FG_OK && et == FG_GGUF_ARRAY && n == 1);
    fg_gguf_close(g);
    free(copy);
    free(b.p);
}

/* ------------------------------------------------------------ bad inputs */

static void writer_file(const char *name, rb *out, void (*fill)(fg_gguf_writer_t *w))
{
    char path[128];
    fg_test_path(path, sizeof path, name);
    fg_gguf_writer_t *w;
    fg_diag d = {{0}};
    if (fg_gguf_writer_create(path, 0, &w, &d) != FG_OK) {
        CHECK_MSG(0, "%s", d.msg);
        return;
    }
    fill(w);
    CHECK(fg_gguf_writer_begin_data(w, &d) == FG_OK);
    static const uint8_t zeros[16];
    while (fg_gguf_writer_write_tensor(w, zeros, sizeof zeros, NULL) == FG_OK)
        ; /* every tensor the fills declare is 16 bytes */
    CHECK_MSG(fg_gguf_writer_finish(w, &d) == FG_OK, "%s", d.msg);
    fg_gguf_writer_destroy(w);
    size_t len = 0;
    uint8_t *p = (uint8_t *)fg_test_read_file(path, &len);
    CHECK(p != NULL);
    out->p = p;
    out->len = out->cap = len;
    unlink(path);
}

static void fill_dup_key(fg_gguf_writer_t *w)
{
    fg_gguf_writer_add_u32(w, "a", 1);
    fg_gguf_writer_add_u32(w, "b", 2);
    fg_gguf_writer_add_str(w, "a", "again");
}

static void fill_dup_tensor(fg_gguf_writer_t *w)
{
    const int64_t ne[1] = {4};
    fg_gguf_writer_add_tensor(w, "x", FG_GGML_F32, 1, ne);
    fg_gguf_writer_add_tensor(w, "y", FG_GGML_F32, 1, ne);
    fg_gguf_writer_add_tensor(w, "x", FG_GGML_F32, 1, ne);
}

static void fill_align(fg_gguf_writer_t *w, uint32_t a)
{
    const int64_t ne[1] = {4};
    fg_gguf_writer_add_u32(w, "general.alignment", a);
    fg_gguf_writer_add_tensor(w, "x", FG_GGML_F32, 1, ne);
}

static void fill_align0(fg_gguf_writer_t *w) { fill_align(w, 0); }
static void fill_align3(fg_gguf_writer_t *w) { fill_align(w, 3); }

static void fill_align_u64(fg_gguf_writer_t *w)
{
    fg_gguf_writer_add_u64(w, "general.alignment", 32);
}

/* One key holding `levels` arrays nested in each other, the innermost empty. */
static void build_nested(rb *b, int levels)
{
    rb_header(b, 3, 0, 1);
    rb_key(b, "k", FG_GGUF_ARRAY);
    for (int i = 1; i < levels; i++)
        rb_u32(b, FG_GGUF_ARRAY), rb_u64(b, 1);
    rb_u32(b, FG_GGUF_UINT8), rb_u64(b, 0);
}

/* general.alignment = 64 and one 16-byte tensor at `offset`. */
static void build_align64(rb *b, uint64_t offset)
{
    const int64_t ne4[1] = {4};
    rb_header(b, 3, 1, 1);
    rb_key(b, "general.alignment", FG_GGUF_UINT32), rb_u32(b, 64);
    rb_tensor(b, "w", 1, ne4, FG_GGML_F32, offset);
    rb_pad(b, 64);
    for (int i = 0; i < 128; i++)
        rb_le(b, 0, 1);
}

static void test_bad_inputs(void)
{
    fprintf(stderr, "bad inputs (case, code, message):\n");
    rb b = {0};
#define CASE(name, want, build)                                                                                 \
    do {                                                                                                        \
        b.len = 0;                                                                                              \
        build;                                                                                                  \
        expect_open(name, &b, want);                                                                            \
    } while (0)
    const int64_t ne4[1] = {4};

    CASE("empty", FG_ERR_GGUF_TRUNCATED, (void)0);
    CASE("bad magic", FG_ERR_GGUF_MAGIC, (rb_header(&b, 3, 0, 0), b.p[0] = 'X'));
    CASE("short bad magic", FG_ERR_GGUF_MAGIC, rb_bytes(&b, "GX", 2));
    CASE("version 0", FG_ERR_GGUF_VERSION, rb_header(&b, 0, 0, 0));
    CASE("version 1", FG_ERR_GGUF_VERSION, rb_header(&b, 1, 0, 0));
    CASE("version 4", FG_ERR_GGUF_VERSION, rb_header(&b, 4, 0, 0));
    CASE("big-endian v3", FG_ERR_GGUF_VERSION, rb_header(&b, 0x03000000, 0, 0));
    CASE("absurd tensor count", FG_ERR_GGUF_LIMIT, rb_header(&b, 3, (uint64_t)1 << 40, 0));
    CASE("tensor count > file", FG_ERR_GGUF_LIMIT, (rb_header(&b, 3, 1000, 0), rb_pad(&b, 256)));
    CASE("absurd key count", FG_ERR_GGUF_LIMIT, rb_header(&b, 3, 0, UINT64_MAX));
    CASE("key count > file", FG_ERR_GGUF_LIMIT, (rb_header(&b, 3, 0, 100), rb_key(&b, "k", FG_GGUF_UINT8)));
    CASE("absurd key name length", FG_ERR_GGUF_LIMIT, (rb_header(&b, 3, 0, 1), rb_u64(&b, (uint64_t)1 << 40),
                                                        rb_pad(&b, 64)));
    CASE("absurd string length", FG_ERR_GGUF_LIMIT,
         (rb_header(&b, 3, 0, 1), rb_key(&b, "s", FG_GGUF_STRING), rb_u64(&b, UINT64_MAX)));
    CASE("string past end", FG_ERR_GGUF_TRUNCATED,
         (rb_header(&b, 3, 0, 1), rb_key(&b, "s", FG_GGUF_STRING), rb_u64(&b, 100), rb_str(&b, "short")));
    CASE("NUL in key name", FG_ERR_GGUF_LIMIT,
         (rb_header(&b, 3, 0, 1), rb_u64(&b, 3), rb_bytes(&b, "a\0b", 3), rb_u32(&b, FG_GGUF_UINT8),
          rb_le(&b, 0, 1)));
    CASE("unknown value type", FG_ERR_GGUF_VALUE_TYPE,
         (rb_header(&b, 3, 0, 1), rb_key(&b, "k", 13), rb_u64(&b, 0)));
    CASE("unknown array elem type", FG_ERR_GGUF_VALUE_TYPE,
         (rb_header(&b, 3, 0, 1), rb_key(&b, "k", FG_GGUF_ARRAY), rb_u32(&b, 99), rb_u64(&b, 0)));
    CASE("absurd array count", FG_ERR_GGUF_LIMIT,
         (rb_header(&b, 3, 0, 1), rb_key(&b, "k", FG_GGUF_ARRAY), rb_u32(&b, FG_GGUF_INT32),
          rb_u64(&b, (uint64_t)1 << 62), rb_u64(&b, 0)));
    CASE("absurd string array count", FG_ERR_GGUF_LIMIT,
         (rb_header(&b, 3, 0, 1), rb_key(&b, "k", FG_GGUF_ARRAY), rb_u32(&b, FG_GGUF_STRING),
          rb_u64(&b, UINT64_MAX / 4), rb_u64(&b, 0)));
    CASE("arrays nested 8 deep", FG_OK, build_nested(&b, 8));
    CASE("arrays nested 9 deep", FG_ERR_GGUF_LIMIT, build_nested(&b, 9));
    CASE("unknown tensor type 4", FG_ERR_GGUF_TENSOR_TYPE, rb_one_tensor(&b, 1, ne4, 4, 0, 32));
    CASE("unknown tensor type 31", FG_ERR_GGUF_TENSOR_TYPE, rb_one_tensor(&b, 1, ne4, 31, 0, 32));
    CASE("unknown tensor type 1000", FG_ERR_GGUF_TENSOR_TYPE, rb_one_tensor(&b, 1, ne4, 1000, 0, 32));
    CASE("duplicate key", FG_ERR_GGUF_DUPLICATE, (free(b.p), writer_file("dupk.gguf", &b, fill_dup_key)));
    CASE("duplicate tensor", FG_ERR_GGUF_DUPLICATE, (free(b.p), writer_file("dupt.gguf", &b, fill_dup_tensor)));
    CASE("alignment 0", FG_ERR_GGUF_LIMIT, (free(b.p), writer_file("al0.gguf", &b, fill_align0)));
    CASE("alignment 3", FG_ERR_GGUF_LIMIT, (free(b.p), writer_file("al3.gguf", &b, fill_align3)));
    CASE("alignment as u64", FG_ERR_GGUF_KEY_TYPE, (free(b.p), writer_file("al64.gguf", &b, fill_align_u64)));
    CASE("data out of bounds", FG_ERR_GGUF_BOUNDS, rb_one_tensor(&b, 1, ne4, FG_GGML_F32, 1 << 20, 32));
    CASE("data one byte short", FG_ERR_GGUF_BOUNDS, rb_one_tensor(&b, 1, ne4, FG_GGML_F32, 0, 15));
    CASE("offset + size overflows", FG_ERR_GGUF_BOUNDS,
         rb_one_tensor(&b, 1, ne4, FG_GGML_F32, UINT64_MAX - 31, 32));
    CASE("misaligned offset", FG_ERR_GGUF_BOUNDS, rb_one_tensor(&b, 1, ne4, FG_GGML_F32, 4, 64));
    CASE("misaligned for general.alignment", FG_ERR_GGUF_BOUNDS, build_align64(&b, 32));
    CASE("aligned for general.alignment", FG_OK, build_align64(&b, 64));
    CASE("n_dims 0", FG_ERR_GGUF_LIMIT, rb_one_tensor(&b, 0, NULL, FG_GGML_F32, 0, 32));
    {
        const int64_t ne5[5] = {1, 1, 1, 1, 1};
        CASE("n_dims 5", FG_ERR_GGUF_LIMIT, rb_one_tensor(&b, 5, ne5, FG_GGML_F32, 0, 32));
    }
    {
        const int64_t neg[2] = {4, -1};
        CASE("negative dim", FG_ERR_GGUF_LIMIT, rb_one_tensor(&b, 2, neg, FG_GGML_F32, 0, 32));
        const int64_t big[3] = {(int64_t)1 << 40, (int64_t)1 << 40, 0};
        CASE("element count overflow", FG_ERR_GGUF_LIMIT, rb_one_tensor(&b, 3, big, FG_GGML_F32, 0, 32));
        const int64_t huge[1] = {(int64_t)1 << 62};
        CASE("byte size overflow", FG_ERR_GGUF_LIMIT, rb_one_tensor(&b, 1, huge, FG_GGML_F32, 0, 32));
        const int64_t q33[1] = {33};
        CASE("ne[0] % block != 0", FG_ERR_GGUF_LIMIT, rb_one_tensor(&b, 1, q33, FG_GGML_Q8_0, 0, 64));
    }
#undef CASE
    free(b.p);
}

/* ------------------------------------------------------------- truncation */

static void fill_small(fg_gguf_writer_t *w)
{
    const char *toks[] = {"a", "bc", ""};
    const int32_t ids[] = {7, 8};
    const int64_t ne4[1] = {4}; /* 16 bytes of f32 */
    fg_gguf_writer_add_str(w, "general.architecture", "tiny");
    fg_gguf_writer_add_arr_str(w, "tok", toks, NULL, 3);
    fg_gguf_writer_add_arr_i32(w, "ids", ids, 2);
    fg_gguf_writer_add_bool(w, "flag", false);
    fg_gguf_writer_add_tensor(w, "w0", FG_GGML_F32, 1, ne4);
    fg_gguf_writer_add_tensor(w, "w1", FG_GGML_F16, 2, (const int64_t[]){4, 2});
}

/* Every prefix of a valid file must fail with a clean error (and no ASan
 * report), until the prefix holds all tensor data. */
static void check_prefixes(const char *what, const rb *file)
{
    fg_gguf_t *g;
    uint8_t *copy;
    fg_diag d = {{0}};
    if (open_exact(file->p, file->len, &g, &copy, &d) != FG_OK) {
        CHECK_MSG(0, "%s: %s", what, d.msg);
        return;
    }
    uint64_t need = fg_gguf_data_offset(g), data_off = fg_gguf_data_offset(g);
    if (fg_gguf_tensor_count(g) == 0)
        need = file->len; /* no data: only the padding may go */
    for (uint64_t i = 0; i < fg_gguf_tensor_count(g); i++) {
        const fg_gguf_tensor *t = fg_gguf_tensor_at(g, i);
        if (data_off + t->offset + t->nbytes > need)
            need = data_off + t->offset + t->nbytes;
    }
    fg_gguf_close(g);
    free(copy);

    int bad = 0;
    for (size_t len = 0; len < file->len; len++) {
        d.msg[0] = '\0';
        fg_err e = open_exact(file->p, len, &g, &copy, &d);
        bool ok;
        if (len >= need)
            ok = e == FG_OK;
        else if (len < 24)
            ok = e == FG_ERR_GGUF_TRUNCATED;
        else if (len >= data_off)
            ok = e == FG_ERR_GGUF_BOUNDS;
        else
            ok = e == FG_ERR_GGUF_TRUNCATED || e == FG_ERR_GGUF_LIMIT || e == FG_ERR_GGUF_BOUNDS;
        ok = ok && (e == FG_OK) == (d.msg[0] == '\0');
        if (!ok && bad++ < 5)
            CHECK_MSG(0, "%s: prefix %zu of %zu: %s (%s)", what, len, file->len, fg_err_name(e), d.msg);
        if (e == FG_OK) {
            fg_gguf_close(g);
            free(copy);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d bad prefixes", what, bad);
}

static void test_truncation(void)
{
    rb file = {0};
    writer_file("small.gguf", &file, fill_small);
    check_prefixes("writer file", &file);
    free(file.p);

    rb raw = {0};
    build_all_types(&raw, 3);
    check_prefixes("all-types file", &raw);
    free(raw.p);
}

/* ------------------------------------------------------- files and writer */

static void test_files_and_writer(void)
{
    char path[128], tmp[160];
    fg_gguf_t *g = NULL;
    fg_diag d = {{0}};

    fg_test_path(path, sizeof path, "missing.gguf");
    CHECK(fg_gguf_open_file(path, &g, &d) == FG_ERR_IO && d.msg[0] && !g);
    CHECK(fg_gguf_open_file(fg_test_dir, &g, &d) == FG_ERR_IO && !g);
    fg_test_path(path, sizeof path, "empty.gguf");
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    d.msg[0] = '\0';
    CHECK(fg_gguf_open_file(path, &g, &d) == FG_ERR_GGUF_TRUNCATED && strstr(d.msg, "empty.gguf"));
    unlink(path);
    CHECK(fg_gguf_open_memory(NULL, 4, &g, &d) == FG_ERR_INVALID_ARG);

    fg_gguf_writer_t *w = NULL;
    fg_test_path(path, sizeof path, "nodir/x.gguf");
    CHECK(fg_gguf_writer_create(path, 0, &w, &d) == FG_ERR_IO && !w);
    fg_test_path(path, sizeof path, "w.gguf");
    CHECK(fg_gguf_writer_create(path, 48, &w, &d) == FG_ERR_INVALID_ARG);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);

    /* misuse is refused; an abandoned writer leaves nothing behind */
    CHECK(fg_gguf_writer_create(path, 0, &w, &d) == FG_OK);
    const int64_t ne[2] = {4, 2};
    float data[8] = {0};
    CHECK(fg_gguf_writer_add_tensor(w, "a", FG_GGML_F32, 2, ne) == FG_OK);
    CHECK(fg_gguf_writer_add_tensor(w, "b", FG_GGML_F32, 2, ne) == FG_OK);
    CHECK(fg_gguf_writer_write_tensor(w, data, 32, &d) == FG_ERR_INVALID_ARG); /* before begin_data */
    CHECK(fg_gguf_writer_begin_data(w, &d) == FG_OK);
    CHECK(fg_gguf_writer_begin_data(w, &d) == FG_ERR_INVALID_ARG);
    CHECK(fg_gguf_writer_write_tensor(w, data, 16, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "'a'"));
    CHECK(fg_gguf_writer_write_tensor(w, data, 32, &d) == FG_OK);
    CHECK(fg_gguf_writer_finish(w, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "'b'"));
    CHECK(file_exists(tmp));
    fg_gguf_writer_destroy(w);
    CHECK(!file_exists(tmp) && !file_exists(path));

    /* a file with no tensors and no keys is valid */
    CHECK(fg_gguf_writer_create(path, 0, &w, &d) == FG_OK);
    CHECK(fg_gguf_writer_begin_data(w, &d) == FG_OK);
    CHECK(fg_gguf_writer_finish(w, &d) == FG_OK);
    CHECK(fg_gguf_writer_write_tensor(w, data, 0, &d) == FG_ERR_INVALID_ARG);
    fg_gguf_writer_destroy(w);
    CHECK(fg_gguf_open_file(path, &g, &d) == FG_OK && g);
    if (g) {
        CHECK(fg_gguf_key_count(g) == 0 && fg_gguf_tensor_count(g) == 0);
        CHECK(fg_gguf_file_size(g) == 32 && fg_gguf_data_offset(g) == 32);
        fg_gguf_close(g);
    }
    unlink(path);
}

/* ------------------------------------------------------------- type table */

/* The types ggml added last (39 mxfp4 .. 42 q2_0) are known to the reader,
 * and binding refuses every type the engine cannot compute with an error
 * that names the tensor and the type. */
static void test_type_table_current(void)
{
    static const struct {
        uint32_t id, elems, bytes;
        const char *name;
    } added[] = {{39, 32, 17, "mxfp4"}, {40, 64, 36, "nvfp4"}, {41, 128, 18, "q1_0"}, {42, 64, 18, "q2_0"}};
    for (size_t i = 0; i < sizeof added / sizeof added[0]; i++) {
        uint32_t e = 0, by = 0;
        CHECK_MSG(fg_ggml_type_size(added[i].id, &e, &by) && e == added[i].elems && by == added[i].bytes,
                  "type %" PRIu32, added[i].id);
        CHECK(fg_ggml_type_name(added[i].id) && strcmp(fg_ggml_type_name(added[i].id), added[i].name) == 0);
    }
    CHECK(!fg_ggml_type_size(43, NULL, NULL));
    for (uint32_t type = 0; type <= 43; type++) {
        /* f32, f16, q8_0, bf16, mxfp4; q4_0, q4_1, q5_0, q5_1; q2_K .. q6_K; iq4_nl, iq4_xs; the lattice IQ types */
        const bool computable = type == FG_GGML_F32 || type == FG_GGML_F16 || type == FG_GGML_BF16 ||
                                type == FG_GGML_Q8_0 || type == 39 || type == 2 || type == 3 || type == 6 ||
                                type == 7 || (type >= 10 && type <= 14) || type == 20 || type == 23 || type == 16 || type == 17 || type == 22 ||
                                type == 18 || type == 21 || type == 19 || type == 29;
        CHECK_MSG(fg_ggml_type_computable(type) == computable, "type %" PRIu32, type);
        fg_diag d = {{0}};
        const fg_err err = fg_ggml_check_computable("blk.0.ffn_up_exps.weight", type, &d);
        if (computable) {
            CHECK_MSG(err == FG_OK, "type %" PRIu32, type);
            continue;
        }
        CHECK_MSG(err == FG_ERR_MODEL_TYPE && strstr(d.msg, "blk.0.ffn_up_exps.weight"), "type %" PRIu32 ": %s", type,
                  d.msg);
        const char *name = fg_ggml_type_name(type);
        CHECK_MSG(name ? strstr(d.msg, name) != NULL : strstr(d.msg, "unknown") != NULL, "type %" PRIu32 ": %s", type,
                  d.msg);
    }
}

static void test_type_table(void)
{
    static const struct {
        uint32_t id, elems, bytes;
    } known[] = {
        {0, 1, 4},     {1, 1, 2},     {2, 32, 18},   {3, 32, 20},   {6, 32, 22},   {7, 32, 24},
        {8, 32, 34},   {9, 32, 36},   {10, 256, 84}, {11, 256, 110}, {12, 256, 144}, {13, 256, 176},
        {14, 256, 210}, {15, 256, 292}, {16, 256, 66}, {17, 256, 74}, {18, 256, 98}, {19, 256, 50},
        {20, 32, 18},  {21, 256, 110}, {22, 256, 82}, {23, 256, 136}, {24, 1, 1},    {25, 1, 2},
        {26, 1, 4},    {27, 1, 8},    {28, 1, 8},    {29, 256, 56}, {30, 1, 2},    {34, 256, 54},
        {35, 256, 66}, {39, 32, 17},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        uint32_t e = 0, by = 0;
        CHECK_MSG(fg_ggml_type_size(known[i].id, &e, &by) && e == known[i].elems && by == known[i].bytes,
                  "type %" PRIu32, known[i].id);
        CHECK(fg_ggml_type_name(known[i].id) != NULL);
    }
    static const uint32_t unknown[] = {4, 5, 31, 32, 33, 36, 37, 38, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        CHECK(!fg_ggml_type_size(unknown[i], NULL, NULL));
        CHECK(fg_ggml_type_name(unknown[i]) == NULL);
    }
    CHECK(strcmp(fg_ggml_type_name(FG_GGML_Q8_0), "q8_0") == 0);
    CHECK(fg_ggml_row_bytes(FG_GGML_Q8_0, 64) == 68);
    CHECK(fg_ggml_row_bytes(FG_GGML_Q8_0, 33) == 0);
    CHECK(fg_ggml_row_bytes(FG_GGML_F32, -1) == 0);
    CHECK(fg_ggml_row_bytes(FG_GGML_F32, INT64_MAX) == 0); /* overflows */
    CHECK(fg_ggml_row_bytes(4, 32) == 0);
    uint64_t nb;
    fg_diag d = {{0}};
    CHECK(fg_ggml_tensor_bytes(FG_GGML_BF16, 3, (const int64_t[]){8, 3, 2}, &nb, &d) == FG_OK && nb == 96);
    CHECK(fg_ggml_tensor_bytes(7, 1, (const int64_t[]){64}, &nb, NULL) == FG_OK && nb == 48);
    CHECK(fg_ggml_tensor_bytes(4, 1, (const int64_t[]){64}, &nb, &d) == FG_ERR_GGUF_TENSOR_TYPE && d.msg[0]);
}

static void remove_tmp_dir(void)
{
    DIR *dir = opendir(fg_test_dir);
    if (dir) {
        struct dirent *de;
        char path[512];
        while ((de = readdir(dir)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
                snprintf(path, sizeof path, "%s/%s", fg_test_dir, de->d_name);
                CHECK_MSG(0, "left behind: %s", path);
                unlink(path);
            }
        closedir(dir);
    }
    rmdir(fg_test_dir);
}

int main(void)
{
    if (!fg_test_dir_make("fg_test_gguf"))
        return 1;
    test_type_table();
    test_type_table_current();
    test_round_trip();
    test_all_types();
    test_bad_inputs();
    test_truncation();
    test_files_and_writer();
    remove_tmp_dir();
    return TEST_DONE("test_gguf");
}

/* session_file.c: session file reader and atomic writer (see session_file.h). */
#include "engine/kv/session_file.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/base/hash64.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "session files are written in host order, which must be little-endian"
#endif

static const uint8_t MAGIC[8] = {'F', 'G', 'S', 'E', 'S', 'S', '\r', '\n'};

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v)
{
    wr32(p, (uint32_t)v);
    wr32(p + 4, (uint32_t)(v >> 32));
}

static int n_pages_of(int n_tokens) { return (n_tokens + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS; }

uint64_t fg_sfile_size_with(const fg_kv_geometry *geo, int n_tokens, int n_pending, uint32_t meta_len,
                            size_t state_bytes)
{
    if (!geo->seq_bytes)
        return FG_SFILE_HEADER_BYTES + (uint64_t)n_tokens * (4 + geo->bytes_per_token) + (uint64_t)n_pending * 4 +
               meta_len + 8;
    return FG_SFILE_HEADER_V3_BYTES + ((uint64_t)n_tokens + (uint64_t)n_pending) * 4 + meta_len +
           (uint64_t)n_pages_of(n_tokens) * geo->page_bytes + state_bytes + 8;
}

uint64_t fg_sfile_size(const fg_kv_geometry *geo, int n_tokens, int n_pending, uint32_t meta_len)
{
    return fg_sfile_size_with(geo, n_tokens, n_pending, meta_len, n_tokens > 0 ? geo->seq_bytes : 0);
}

uint64_t fg_sfile_max_size(const fg_sfile_expect *ex)
{
    return fg_sfile_size(&ex->geo, ex->max_tokens, 0, FG_SFILE_META_MAX);
}

/* A NUL-padded name field: 1..64 bytes, nothing but NULs after them. */
static bool read_name(const uint8_t *field, char out[FG_SFILE_OWNER_BYTES + 1])
{
    size_t n = strnlen((const char *)field, FG_SFILE_OWNER_BYTES);
    for (size_t i = n; i < FG_SFILE_OWNER_BYTES; i++)
        if (field[i])
            return false;
    memcpy(out, field, n);
    out[n] = 0;
    return n > 0;
}

/* The architecture field of a version 3 header: 1..15 bytes, NULs after them. */
static bool read_arch(const uint8_t *field, char out[FG_SFILE_ARCH_BYTES])
{
    memcpy(out, field, FG_SFILE_ARCH_BYTES - 1);
    out[FG_SFILE_ARCH_BYTES - 1] = 0;
    const size_t n = strlen(out);
    for (size_t i = n; i < FG_SFILE_ARCH_BYTES; i++)
        if (field[i])
            return false;
    return n > 0;
}

fg_err fg_sfile_parse(const uint8_t *buf, size_t len, const fg_sfile_expect *ex, fg_sfile_view *v, fg_diag *diag)
{
    memset(v, 0, sizeof *v);
    if (len < 8 || (len >= 8 && memcmp(buf, MAGIC, 8) != 0))
        return len < 8 && memcmp(buf, MAGIC, len) == 0
                   ? fg_diag_set(diag, FG_ERR_SESSION_TRUNCATED, "file of %zu bytes ends inside the magic", len)
                   : fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "not a session file (bad magic)");
    if (len < FG_SFILE_HEADER_BYTES)
        return fg_diag_set(diag, FG_ERR_SESSION_TRUNCATED, "file of %zu bytes ends inside the %d-byte header", len,
                           FG_SFILE_HEADER_BYTES);
    uint32_t version = rd32(buf + 8);
    if (version != FG_SFILE_VERSION && version != FG_SFILE_VERSION_PAGES)
        return fg_diag_set(diag, FG_ERR_SESSION_VERSION, "format version %u, this engine reads %d and %d", version,
                           FG_SFILE_VERSION, FG_SFILE_VERSION_PAGES);
    const bool v3 = version == FG_SFILE_VERSION_PAGES;
    const size_t hdr = v3 ? FG_SFILE_HEADER_V3_BYTES : FG_SFILE_HEADER_BYTES;
    if (len < hdr)
        return fg_diag_set(diag, FG_ERR_SESSION_TRUNCATED, "file of %zu bytes ends inside the %zu-byte header", len,
                           hdr);
    /* A layout this engine does not know is a format it cannot read (a newer writer's). */
    if (v3 && rd32(buf + 224) != FG_SFILE_LAYOUT_PAGES)
        return fg_diag_set(diag, FG_ERR_SESSION_VERSION, "format version 3 with cache layout %08x, this engine reads "
                           "%08x (pages and state)", rd32(buf + 224), FG_SFILE_LAYOUT_PAGES);
    uint32_t n_tokens = rd32(buf + 52), meta_len = rd32(buf + 56), row_bytes = rd32(buf + 44);
    uint32_t n_layer = rd32(buf + 32), n_pending = rd32(buf + 60);
    uint32_t page_bytes = v3 ? rd32(buf + 228) : 0, state_bytes = v3 ? rd32(buf + 232) : 0;
    uint64_t kv_bytes = rd64(buf + 64);
    if (n_tokens > (uint32_t)ex->max_tokens || n_pending > (uint32_t)ex->max_tokens - n_tokens)
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "%u + %u tokens exceed the context of %d", n_tokens,
                           n_pending, ex->max_tokens);
    if (meta_len > FG_SFILE_META_MAX)
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "meta of %u bytes exceeds %d", meta_len, FG_SFILE_META_MAX);
    /* Sizes are bounded by the engine's geometry before any arithmetic with them. */
    if (row_bytes > ex->geo.row_bytes * 4 + 64 || n_layer > (uint32_t)ex->geo.n_layer * 4 + 4)
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "row size %u or layer count %u out of range", row_bytes,
                           n_layer);
    /* (Page and state sizes are u32 and the page count is bounded: their sum cannot overflow. They are not
     * bounded by this engine's layout, so that another architecture's file gets _MODEL below.) */
    const uint32_t first = v3 ? rd32(buf + 236) : 0;
    if (first % FG_KV_PAGE_TOKENS || first > (uint32_t)ex->max_tokens - n_tokens)
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "first token at %u: not a page boundary within the context "
                           "of %d for %u tokens", first, ex->max_tokens, n_tokens);
    uint64_t want_kv = v3 ? (uint64_t)n_pages_of((int)n_tokens) * page_bytes : (uint64_t)n_tokens * n_layer * row_bytes;
    if (kv_bytes != want_kv)
        return v3 ? fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "KV size %llu does not match %u tokens in %u-byte pages",
                                (unsigned long long)kv_bytes, n_tokens, page_bytes)
                  : fg_diag_set(diag, FG_ERR_SESSION_CORRUPT,
                                "KV size %llu does not match %u tokens x %u layers x %u bytes",
                                (unsigned long long)kv_bytes, n_tokens, n_layer, row_bytes);
    uint64_t total = hdr + ((uint64_t)n_tokens + n_pending) * 4 + meta_len + kv_bytes + state_bytes + 8;
    if (len < total)
        return fg_diag_set(diag, FG_ERR_SESSION_TRUNCATED, "file of %zu bytes, its header says %llu", len,
                           (unsigned long long)total);
    if (len > total)
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "file of %zu bytes, its header says %llu", len,
                           (unsigned long long)total);
    uint64_t sum = fg_hash64(buf, (size_t)total - 8, FG_SFILE_MAGIC_SEED);
    if (sum != rd64(buf + total - 8))
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "checksum mismatch");
    char arch[FG_SFILE_ARCH_BYTES] = "";
    if (v3 && !read_arch(buf + 240, arch))
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "the header's architecture name is malformed");
    if (v3 && (!ex->arch || strcmp(arch, ex->arch) != 0))
        return fg_diag_set(diag, FG_ERR_SESSION_MODEL, "saved by a %s model (%.16s), this engine runs %s (%.16s)",
                           arch, (const char *)(buf + 16), ex->arch ? ex->arch : "a model without cache state",
                           ex->model_identity);
    const bool rows_for_state = !v3 && ex->geo.seq_bytes && ex->arch; /* e.g. deepseek2's file, a deepseek4 engine */
    if (memcmp(buf + 16, ex->model_identity, 16) != 0)
        return fg_diag_set(diag, FG_ERR_SESSION_MODEL, "saved by model %.16s%s%s%s, this engine runs %.16s",
                           (const char *)(buf + 16), rows_for_state ? " (a version 2 file: token rows, not a " : "",
                           rows_for_state ? ex->arch : "", rows_for_state ? " cache)" : "", ex->model_identity);
    if (n_layer != (uint32_t)ex->geo.n_layer || rd32(buf + 36) != (uint32_t)ex->geo.kv_lora ||
        rd32(buf + 40) != (uint32_t)ex->geo.n_rope || rd32(buf + 48) != FG_KV_PAGE_TOKENS)
        return fg_diag_set(diag, FG_ERR_SESSION_MODEL, "KV geometry differs from this model's");
    uint32_t format = rd32(buf + 12);
    if (format != (uint32_t)ex->geo.format || row_bytes != ex->geo.row_bytes)
        return fg_diag_set(diag, FG_ERR_SESSION_VERSION, "KV cache format %s (%u-byte rows), this engine uses %s",
                           format < FG_KV__COUNT ? fg_kv_format_name((fg_kv_format)format) : "unknown", row_bytes,
                           fg_kv_format_name(ex->geo.format));
    if (v3 != (ex->geo.seq_bytes != 0))
        return fg_diag_set(diag, FG_ERR_SESSION_VERSION, "format version %u, a cache %s needs version %d", version,
                           ex->geo.seq_bytes ? "with per-sequence state" : "of token rows",
                           ex->geo.seq_bytes ? FG_SFILE_VERSION_PAGES : FG_SFILE_VERSION);
    if (v3 && (page_bytes != ex->geo.page_bytes || (state_bytes != 0 && state_bytes != ex->geo.seq_bytes)))
        return fg_diag_set(diag, FG_ERR_SESSION_VERSION,
                           "cache of %u-byte pages and %u bytes of state, this engine's has %zu and %zu", page_bytes,
                           state_bytes, ex->geo.page_bytes, ex->geo.seq_bytes);
    if (!read_name(buf + 96, v->tenant) || !read_name(buf + 96 + FG_SFILE_OWNER_BYTES, v->name)) {
        memset(v, 0, sizeof *v);
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "the header's tenant or file name is malformed");
    }
    v->version = (int)version;
    v->n_tokens = (int)n_tokens;
    v->n_pending = (int)n_pending;
    v->tokens = buf + hdr;
    v->meta = v->tokens + ((size_t)n_tokens + n_pending) * 4;
    v->meta_len = meta_len;
    if (v3) {
        v->pages = v->meta + meta_len;
        v->state = state_bytes ? v->pages + kv_bytes : NULL;
        v->state_len = state_bytes;
        v->first_token = (int)first;
        /* The state must hold exactly the tokens up to the end of the pages it comes with. */
        if (v->state && (state_bytes < 4 || rd32(v->state) != first + n_tokens)) {
            uint32_t held = state_bytes >= 4 ? rd32(v->state) : 0;
            memset(v, 0, sizeof *v);
            return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "the cache state holds %u tokens, the file %u from %u",
                               held, n_tokens, first);
        }
    } else {
        v->rows = v->meta + meta_len;
    }
    for (int i = 0; i < v->n_tokens + v->n_pending; i++) {
        int32_t t = fg_sfile_token(v, i);
        if (t < 0 || t >= ex->n_vocab) {
            memset(v, 0, sizeof *v);
            return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "token %d at %d is outside the vocabulary", t, i);
        }
    }
    return FG_OK;
}

fg_err fg_sfile_check_owner(const fg_sfile_view *v, const char *tenant, const char *name, fg_diag *diag)
{
    if (strcmp(v->tenant, tenant) == 0 && strcmp(v->name, name) == 0)
        return FG_OK;
    return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "the file is %s/%s's, not %s/%s (copied or renamed)", v->tenant,
                       v->name, tenant, name);
}

int32_t fg_sfile_token(const fg_sfile_view *v, int i) { return (int32_t)rd32(v->tokens + (size_t)i * 4); }

void fg_sfile_copy_rows(const fg_sfile_view *v, const fg_kv_geometry *geo, const fg_kv_seq *q, int n)
{
    const uint8_t *src = v->rows;
    for (int t = 0; t < n; t++)
        for (int il = 0; il < geo->n_layer; il++, src += geo->row_bytes)
            memcpy(fg_kv_row(geo, q, il, t), src, geo->row_bytes);
}

const uint8_t *fg_sfile_row(const fg_sfile_view *v, const fg_kv_geometry *geo, int il, int t)
{
    return v->rows + ((size_t)t * (size_t)geo->n_layer + (size_t)il) * geo->row_bytes;
}

const uint8_t *fg_sfile_page(const fg_sfile_view *v, const fg_kv_geometry *geo, int k)
{
    return v->pages + (size_t)k * geo->page_bytes;
}

fg_err fg_sfile_read(const char *path, uint64_t max_bytes, uint8_t **buf, size_t *len, fg_diag *diag)
{
    *buf = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? fg_diag_set(diag, FG_ERR_NOT_FOUND, "no session file %s", path)
                               : fg_diag_set(diag, FG_ERR_IO, "open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int en = errno;
        close(fd);
        return fg_diag_set(diag, FG_ERR_IO, "stat %s: %s", path, strerror(en));
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "%s: %lld bytes, more than any session of this engine",
                           path, (long long)st.st_size);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *b = malloc(n ? n : 1);
    if (!b) {
        close(fd);
        return fg_diag_set(diag, FG_ERR_NOMEM, "no memory to read %zu bytes of %s", n, path);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int en = errno;
            close(fd);
            free(b);
            return fg_diag_set(diag, FG_ERR_IO, "read %s: %s", path, strerror(en));
        }
        if (r == 0)
            break; /* shrank under us: the parser reports it as truncated */
        got += (size_t)r;
    }
    close(fd);
    *buf = b;
    *len = got;
    return FG_OK;
}

/* ---- writer ---- */

typedef struct wbuf {
    int fd;
    uint8_t data[1 << 16];
    size_t n;
    fg_hash64_state h;
    int err;          /* errno of the first failure */
} wbuf;

static void wb_flush(wbuf *w)
{
    size_t off = 0;
    while (off < w->n && !w->err) {
        ssize_t r = write(w->fd, w->data + off, w->n - off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            w->err = errno;
        else
            off += (size_t)r;
    }
    w->n = 0;
}

static void wb_put(wbuf *w, const void *p, size_t n)
{
    fg_hash64_update(&w->h, p, n);
    const uint8_t *b = p;
    while (n > 0 && !w->err) {
        size_t take = sizeof w->data - w->n < n ? sizeof w->data - w->n : n;
        memcpy(w->data + w->n, b, take);
        w->n += take;
        b += take;
        n -= take;
        if (w->n == sizeof w->data)
            wb_flush(w);
    }
}

static fg_err write_error(fg_diag *diag, int en, const char *what, const char *path)
{
    fg_err code = en == ENOSPC || en == EDQUOT || en == EFBIG ? FG_ERR_DISK_FULL : FG_ERR_IO;
    return fg_diag_set(diag, code, "%s %s: %s", what, path, strerror(en));
}

fg_err fg_sfile_write(const char *dir, const char *name, const fg_sfile_content *c, fg_diag *diag)
{
    return fg_sfile_write_as(dir, name, ".fgs", c, diag);
}

fg_err fg_sfile_write_as(const char *dir, const char *name, const char *suffix, const fg_sfile_content *c,
                         fg_diag *diag)
{
    char path[4096], tmp[4096];
    size_t tl = c->tenant ? strlen(c->tenant) : 0, nl = strlen(name);
    if (tl < 1 || tl > FG_SFILE_OWNER_BYTES || nl < 1 || nl > FG_SFILE_OWNER_BYTES)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "session file %s: tenant and name must be 1..%d bytes", name,
                           FG_SFILE_OWNER_BYTES);
    if ((size_t)snprintf(path, sizeof path, "%s/%s%s", dir, name, suffix) >= sizeof path ||
        (size_t)snprintf(tmp, sizeof tmp, "%s/%s%s.tmp", dir, name, suffix) >= sizeof tmp)
        return fg_diag_set(diag, FG_ERR_IO, "session path too long under %s", dir);
    const fg_kv_geometry *geo = c->geo;
    const bool v3 = geo->seq_bytes != 0;
    const size_t an = v3 && c->arch ? strlen(c->arch) : 0;
    if (v3 && (an < 1 || an >= FG_SFILE_ARCH_BYTES))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "session file %s: the architecture name must be 1..%d bytes",
                           name, FG_SFILE_ARCH_BYTES - 1);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return write_error(diag, errno, "mkdir", dir);
    wbuf *w = malloc(sizeof *w);
    if (!w)
        return fg_diag_set(diag, FG_ERR_NOMEM, "no memory for the write buffer of %s", path);
    w->n = 0;
    w->err = 0;
    fg_hash64_init(&w->h, FG_SFILE_MAGIC_SEED);
    w->fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        fg_err e = write_error(diag, errno, "create", tmp);
        free(w);
        return e;
    }
    const int n_pages = n_pages_of(c->n_tokens);
    uint8_t hdr[FG_SFILE_HEADER_V3_BYTES] = {0};
    memcpy(hdr, MAGIC, 8);
    wr32(hdr + 8, v3 ? FG_SFILE_VERSION_PAGES : FG_SFILE_VERSION);
    wr32(hdr + 12, (uint32_t)geo->format);
    memcpy(hdr + 16, c->model_identity, strnlen(c->model_identity, 16));
    wr32(hdr + 32, (uint32_t)geo->n_layer);
    wr32(hdr + 36, (uint32_t)geo->kv_lora);
    wr32(hdr + 40, (uint32_t)geo->n_rope);
    wr32(hdr + 44, (uint32_t)geo->row_bytes);
    wr32(hdr + 48, FG_KV_PAGE_TOKENS);
    wr32(hdr + 52, (uint32_t)c->n_tokens);
    wr32(hdr + 56, c->meta_len);
    wr32(hdr + 60, (uint32_t)c->n_pending);
    wr64(hdr + 64, v3 ? (uint64_t)n_pages * geo->page_bytes : (uint64_t)c->n_tokens * geo->bytes_per_token);
    memcpy(hdr + 96, c->tenant, tl);
    memcpy(hdr + 96 + FG_SFILE_OWNER_BYTES, name, nl);
    if (v3) {
        wr32(hdr + 224, FG_SFILE_LAYOUT_PAGES);
        wr32(hdr + 228, (uint32_t)geo->page_bytes);
        wr32(hdr + 232, c->state ? (uint32_t)geo->seq_bytes : 0);
        wr32(hdr + 236, (uint32_t)c->first_token);
        memcpy(hdr + 240, c->arch, an);
    }
    wb_put(w, hdr, v3 ? FG_SFILE_HEADER_V3_BYTES : FG_SFILE_HEADER_BYTES);
    wb_put(w, c->tokens, ((size_t)c->n_tokens + (size_t)c->n_pending) * 4);
    if (c->meta_len)
        wb_put(w, c->meta, c->meta_len);
    fg_kv_seq q = {.pages = (uint8_t **)c->pages, .n_pages = n_pages, .n_tokens = c->n_tokens,
                   .max_tokens = c->n_tokens};
    if (v3 && c->rows)
        wb_put(w, c->rows, (size_t)n_pages * geo->page_bytes); /* already in file order */
    else if (v3)
        for (int k = 0; k < n_pages; k++)
            wb_put(w, c->pages[k], geo->page_bytes);
    else if (c->rows)
        wb_put(w, c->rows, (size_t)c->n_tokens * geo->bytes_per_token); /* already in file order */
    else
        for (int t = 0; t < c->n_tokens; t++)
            for (int il = 0; il < geo->n_layer; il++)
                wb_put(w, fg_kv_row(geo, &q, il, t), geo->row_bytes);
    if (v3 && c->state)
        wb_put(w, c->state, geo->seq_bytes);
    uint8_t sum[8];
    wr64(sum, fg_hash64_final(&w->h));
    wb_put(w, sum, 8);
    wb_flush(w);
    int en = w->err;
    if (!en && fsync(w->fd) != 0)
        en = errno;
    if (close(w->fd) != 0 && !en)
        en = errno;
    free(w);
    if (!en && rename(tmp, path) != 0)
        en = errno;
    if (en) {
        unlink(tmp);
        return write_error(diag, en, "write", path);
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (fsync(dfd) != 0)
            en = errno;
        close(dfd);
    }
    return en ? write_error(diag, en, "fsync directory", dir) : FG_OK;
}

/* test_base.c: the base layer (config/base/): names, FNV-1a, the intrusive
 * list, the token vector, the clocks and random bytes, the byte buffer, whole
 * files. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/base/bytes.h"
#include "config/base/clock.h"
#include "config/base/file.h"
#include "config/base/hash64.h"
#include "config/base/list.h"
#include "config/base/name.h"
#include "config/base/random.h"
#include "config/base/tokens.h"
#include "tests/unit/fg_test.h"

static void test_name(void)
{
    char max[FG_NAME_MAX + 2];
    memset(max, 'a', sizeof max);
    CHECK(fg_name_valid("tenant-A_9", 10));
    CHECK(fg_name_valid(max, FG_NAME_MAX));
    CHECK(!fg_name_valid(max, FG_NAME_MAX + 1));
    CHECK(!fg_name_valid("", 0));
    CHECK(!fg_name_valid("a/b", 3));
    CHECK(!fg_name_valid("a.b", 3));
    CHECK(!fg_name_valid("a b", 3));
    CHECK(!fg_name_valid("ab\0c", 4)); /* a NUL inside the length */
    CHECK(!fg_name_valid("{t}", 3));
}

static void test_fnv(void)
{
    /* The published FNV-1a 64 test vectors. */
    CHECK(fg_fnv1a64("", 0) == 0xcbf29ce484222325ull);
    CHECK(fg_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
    CHECK(fg_fnv1a64("foobar", 6) == 0x85944171f73967e8ull);
    CHECK(fg_fnv1a64_add(fg_fnv1a64("foo", 3), "bar", 3) == fg_fnv1a64("foobar", 6));
}

typedef struct item {
    int id;
    fg_list link;
} item;

static void test_list(void)
{
    fg_list head, other;
    fg_list_init(&head);
    CHECK(fg_list_empty(&head) && !fg_list_first(&head) && !fg_list_pop_front(&head));
    item it[4];
    for (int i = 0; i < 4; i++) {
        it[i].id = i;
        fg_list_init(&it[i].link);
        CHECK(!fg_list_linked(&it[i].link));
    }
    fg_list_push_back(&head, &it[1].link);
    fg_list_push_front(&head, &it[0].link);
    fg_list_push_back(&head, &it[2].link);
    fg_list_push_back(&head, &it[3].link);
    int want[] = {0, 1, 2, 3}, n = 0;
    for (fg_list *l = fg_list_first(&head); l; l = fg_list_next(&head, l), n++)
        CHECK(n < 4 && fg_list_entry(l, item, link)->id == want[n]);
    CHECK(n == 4);
    fg_list_remove(&it[2].link);
    CHECK(!fg_list_linked(&it[2].link) && fg_list_linked(&it[1].link));
    fg_list_take(&other, &head);
    CHECK(fg_list_empty(&head));
    int after[] = {0, 1, 3};
    n = 0;
    for (fg_list *l; (l = fg_list_pop_front(&other)); n++)
        CHECK(n < 3 && fg_list_entry(l, item, link)->id == after[n]);
    CHECK(n == 3 && fg_list_empty(&other));
    fg_list_take(&other, &head); /* an empty source */
    CHECK(fg_list_empty(&other));
}

static void test_tokens(void)
{
    fg_tokens t = {0};
    int32_t ids[100];
    for (int i = 0; i < 100; i++)
        ids[i] = i * 7;
    CHECK(fg_tokens_push(&t, ids, 0) == FG_OK && t.n == 0);
    CHECK(fg_tokens_push(&t, ids, 100) == FG_OK && t.n == 100 && t.cap >= 100);
    CHECK(fg_tokens_push(&t, ids, 3) == FG_OK && t.n == 103 && t.v[102] == 14 && t.v[99] == 693);
    CHECK(fg_tokens_reserve(&t, 1000) == FG_OK && t.cap >= 1000 && t.n == 103);
    fg_tokens_free(&t);
    CHECK(!t.v && t.n == 0 && t.cap == 0);
}

static void test_clock_random(void)
{
    const double a = fg_clock_mono_s();
    const int64_t us = fg_clock_mono_us();
    CHECK(fg_clock_mono_s() >= a && fg_clock_mono_us() >= us);
    CHECK(fg_clock_real_us() > 1600000000ll * 1000000 && fg_clock_real_s() > 1.6e9);
    const double r0 = fg_clock_real_s();
    struct timespec d = fg_clock_deadline(1.75);
    const double r1 = fg_clock_real_s(), ds = (double)d.tv_sec + d.tv_nsec * 1e-9;
    CHECK(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
    CHECK(ds >= r0 + 1.75 - 1e-5 && ds <= r1 + 1.75 + 1e-5);
    uint8_t b[32] = {0}, zero[32] = {0};
    CHECK(fg_random_bytes(b, sizeof b));
    CHECK(memcmp(b, zero, sizeof b) != 0);
    CHECK(fg_random_seed() != fg_random_seed());
}

/* The whole file, NUL-terminated, across the reader's growth steps; the limit
 * and a missing file give their errno and allocate nothing. */
static void test_file_read(void)
{
    char path[] = "/tmp/fg_base_XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    static char data[10000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (char)('a' + i % 26);
    CHECK(write(fd, data, sizeof data) == (ssize_t)sizeof data);
    close(fd);
    char *buf = NULL;
    size_t len = 0;
    CHECK(fg_file_read(path, sizeof data, &buf, &len) == 0);
    CHECK(buf && len == sizeof data && memcmp(buf, data, len) == 0 && buf[len] == 0);
    free(buf);
    buf = NULL;
    CHECK(fg_file_read(path, sizeof data - 1, &buf, &len) == EFBIG && buf == NULL);
    unlink(path);
    CHECK(fg_file_read(path, sizeof data, &buf, &len) == ENOENT && buf == NULL);
}

static void test_bytes(void)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    CHECK(fg_bytes_append(&buf, &len, &cap, "", 0) && buf && len == 0 && buf[0] == 0);
    char chunk[300];
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 10; i++)
        CHECK(fg_bytes_append(&buf, &len, &cap, chunk, sizeof chunk));
    CHECK(len == 3000 && cap > len && buf[len] == 0 && strspn(buf, "x") == 3000);
    char *was = buf;
    CHECK(!fg_bytes_append(&buf, &len, &cap, chunk, SIZE_MAX - 8)); /* refused, nothing changed */
    CHECK(buf == was && len == 3000 && buf[len] == 0);
    free(buf);
}

int main(void)
{
    test_name();
    test_fnv();
    test_list();
    test_tokens();
    test_clock_random();
    test_file_read();
    test_bytes();
    return TEST_DONE("test_base");
}

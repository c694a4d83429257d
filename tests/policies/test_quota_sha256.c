/* test_quota_sha256.c: SHA-256 against the FIPS 180-4 / NIST example
 * vectors, incremental updates split at every offset, hex round trip, and
 * the constant-time compare. */
#include <string.h>

#include "fg_test.h"
#include "quota_cases.h"
#include "policies/sha256.h"

static void check_hex(const void *msg, size_t len, const char *want)
{
    uint8_t d[FG_SHA256_BYTES];
    char hex[FG_SHA256_HEX_LEN + 1];
    fg_sha256(msg, len, d);
    fg_sha256_hex(d, hex);
    CHECK_MSG(strcmp(hex, want) == 0, "len %zu: got %s want %s", len, hex, want);
}

int test_quota_sha256(void)
{
    check_hex("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_hex("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_hex(m448, strlen(m448), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    check_hex(m896, strlen(m896), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");

    /* One million 'a', fed in uneven pieces. */
    static char a[1000000];
    memset(a, 'a', sizeof a);
    check_hex(a, sizeof a, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    fg_sha256_ctx s;
    fg_sha256_init(&s);
    for (size_t at = 0, step = 1; at < sizeof a; at += step, step = step * 3 % 997 + 1)
        fg_sha256_update(&s, a + at, at + step <= sizeof a ? step : sizeof a - at);
    uint8_t d1[FG_SHA256_BYTES], d2[FG_SHA256_BYTES];
    fg_sha256_final(&s, d1);
    fg_sha256(a, sizeof a, d2);
    CHECK(memcmp(d1, d2, sizeof d1) == 0);

    /* Every split point of a 130-byte message (crosses two block boundaries and the padding edge). */
    char msg[130];
    for (size_t i = 0; i < sizeof msg; i++)
        msg[i] = (char)(i * 7 + 1);
    for (size_t len = 0; len <= sizeof msg; len++) {
        fg_sha256(msg, len, d2);
        for (size_t cut = 0; cut <= len; cut += 13) {
            fg_sha256_init(&s);
            fg_sha256_update(&s, msg, cut);
            fg_sha256_update(&s, msg + cut, len - cut);
            fg_sha256_final(&s, d1);
            CHECK_MSG(memcmp(d1, d2, sizeof d1) == 0, "len %zu cut %zu", len, cut);
        }
    }

    /* Hex round trip and compare. */
    char hex[FG_SHA256_HEX_LEN + 1];
    fg_sha256("abc", 3, d1);
    fg_sha256_hex(d1, hex);
    CHECK(fg_sha256_from_hex(hex, d2));
    CHECK(fg_sha256_equal(d1, d2));
    d2[31] ^= 1;
    CHECK(!fg_sha256_equal(d1, d2));
    CHECK(!fg_sha256_from_hex("abc", d2));
    CHECK(!fg_sha256_from_hex("zz7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", d2));
    CHECK(fg_sha256_from_hex("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD", d2));
    CHECK(fg_sha256_equal(d1, d2));
    return TEST_DONE("quota_sha256");
}

/* fg_test.h: the few macros our C tests use. A failed check prints file:line
 * and the expression, and the test exits non-zero at the end. */
#ifndef FG_TEST_H
#define FG_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fg_test_failures;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            fg_test_failures++;                                                  \
        }                                                                        \
    } while (0)

#define CHECK_MSG(cond, ...)                                                     \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
            fg_test_failures++;                                                  \
        }                                                                        \
    } while (0)

/* A small deterministic generator for test data (xorshift64). */
static uint64_t fg_test_rng_state = 0x2545f4914f6cdd1dull;
static inline void rng_seed(uint64_t seed) { fg_test_rng_state = seed ? seed : 1; }
static inline uint32_t rng_u32(void)
{
    fg_test_rng_state ^= fg_test_rng_state << 13;
    fg_test_rng_state ^= fg_test_rng_state >> 7;
    fg_test_rng_state ^= fg_test_rng_state << 17;
    return (uint32_t)(fg_test_rng_state >> 16);
}
/* uniform in [-1, 1) */
static inline float rng_f(void) { return (float)(rng_u32() >> 8) * (2.0f / 16777216.0f) - 1.0f; }

/* The bit pattern of a float, for exact comparisons and hex dumps. */
static inline uint32_t fg_test_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Ends main(): prints a summary line and returns the exit status. */
#define TEST_DONE(name)                                                          \
    (fprintf(stderr, "%s: %s (%d failures)\n", name, fg_test_failures ? "FAIL" : "ok", \
             fg_test_failures),                                                  \
     fg_test_failures ? 1 : 0)

/* Output buffers with FG_TEST_GUARD floats of a NaN canary on each side: a
 * kernel writes y + FG_TEST_GUARD; fg_test_guards_intact tells whether it
 * wrote outside its n floats. */
#define FG_TEST_GUARD 16
#define FG_TEST_CANARY 0x7fa5a5a5u

static inline float *fg_test_alloc_guarded(int64_t n)
{
    float *y = malloc((size_t)(n + 2 * FG_TEST_GUARD) * sizeof *y);
    const uint32_t c = FG_TEST_CANARY;
    for (int64_t i = 0; y && i < n + 2 * FG_TEST_GUARD; i++)
        memcpy(&y[i], &c, 4);
    return y;
}

static inline int fg_test_guards_intact(const float *y, int64_t n)
{
    for (int i = 0; i < FG_TEST_GUARD; i++) {
        uint32_t a, b;
        memcpy(&a, &y[i], 4);
        memcpy(&b, &y[FG_TEST_GUARD + n + i], 4);
        if (a != FG_TEST_CANARY || b != FG_TEST_CANARY)
            return 0;
    }
    return 1;
}

#endif

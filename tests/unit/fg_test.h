/* fg_test.h: the few macros our C tests use. A failed check prints file:line
 * and the expression, and the test exits non-zero at the end. */
#ifndef FG_TEST_H
#define FG_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

/* Ends main(): prints a summary line and returns the exit status. */
#define TEST_DONE(name)                                                          \
    (fprintf(stderr, "%s: %s (%d failures)\n", name, fg_test_failures ? "FAIL" : "ok", \
             fg_test_failures),                                                  \
     fg_test_failures ? 1 : 0)

#endif

/* fg_test.h: the few macros our C tests use. A failed check prints file:line
 * and the expression, and the test exits non-zero at the end. */
#ifndef FG_TEST_H
#define FG_TEST_H

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

/* Ends main(): prints a summary line and returns the exit status. */
#define TEST_DONE(name)                                                          \
    (fprintf(stderr, "%s: %s (%d failures)\n", name, fg_test_failures ? "FAIL" : "ok", \
             fg_test_failures),                                                  \
     fg_test_failures ? 1 : 0)

#endif

/* fg_test_files.h: a C test's temporary directory and whole-file reads, for
 * the tests that write files (GGUF reader and writer, model generator,
 * tokenizer) or read the docs they check against. */
#ifndef FG_TEST_FILES_H
#define FG_TEST_FILES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The test's own directory, made by fg_test_dir_make. */
static char fg_test_dir[64];

/* Makes a fresh /tmp/<prefix>_XXXXXX as fg_test_dir; 0 (and a perror line)
 * when it cannot. */
static inline int fg_test_dir_make(const char *prefix)
{
    snprintf(fg_test_dir, sizeof fg_test_dir, "/tmp/%s_XXXXXX", prefix);
    if (!mkdtemp(fg_test_dir)) {
        perror("mkdtemp");
        return 0;
    }
    return 1;
}

/* out = fg_test_dir/name */
static inline void fg_test_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", fg_test_dir, name);
}

/* The whole file, with a NUL after its *len bytes (len may be NULL); the
 * caller frees it. NULL when it cannot be opened or read. */
static inline char *fg_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    char *buf = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len)
            *len = (size_t)n;
    }
    return buf;
}

/* Compares two files: 0 the same bytes, 1 the same size but other bytes, 2
 * other sizes, -1 when either cannot be read. */
static inline int fg_test_compare_files(const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    char *pa = fg_test_read_file(a, &la), *pb = fg_test_read_file(b, &lb);
    const int r = !pa || !pb ? -1 : la != lb ? 2 : memcmp(pa, pb, la) != 0;
    free(pa);
    free(pb);
    return r;
}

#endif

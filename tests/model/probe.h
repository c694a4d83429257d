/* probe.h: what the forward-pass probes (ds4_probe, ds2_mtp_probe) share:
 * their error line and their raw f32 output files. */
#ifndef FG_PROBE_H
#define FG_PROBE_H

#include <stdio.h>

#include "config/fg_error.h"

/* Prints "PROG: WHAT: message" to stderr; returns 1 (the probes' failure status). */
static inline int probe_fail(const char *prog, const char *what, const fg_diag *d)
{
    fprintf(stderr, "%s: %s: %s\n", prog, what, d ? d->msg : "");
    return 1;
}

/* Writes n floats to path (little-endian hosts: the file is raw LE f32). Returns 0 or -1. */
static inline int probe_write_f32(const char *path, const float *v, size_t n)
{
    FILE *fp = fopen(path, "wb");
    int ok = fp && fwrite(v, sizeof *v, n, fp) == n;
    if (fp && fclose(fp))
        ok = 0;
    return ok ? 0 : -1;
}

#endif

/* fuzz_dir_record.c: libFuzzer target for an instance record of the cluster
 * view (policies/session_dir.h), which every instance reads from Redis.
 *
 * Any bytes either parse or fail with a message; a parsed record formats
 * again (after its time) to the same fields (a fixed point).
 * The seed corpus is tests/fuzz/corpus/fuzz_dir_record/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policies/session_dir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_dir_instance d, again;
    fg_diag diag = {{0}};
    if (fg_dir_record_parse((const char *)data, size, &d, &diag) != FG_OK) {
        if (!diag.msg[0])
            abort(); /* a refusal says why */
        return 0;
    }
    char rec[FG_DIR_RECORD_MAX + 32];
    int head = snprintf(rec, sizeof rec, "%lld ", (long long)d.published_ms);
    size_t n = fg_dir_record_format(d.url, &d.load, rec + head, sizeof rec - (size_t)head);
    if (!n)
        abort(); /* what parses fits */
    if (fg_dir_record_parse(rec, (size_t)head + n, &again, &diag) != FG_OK)
        abort();
    const fg_dir_load *a = &again.load, *b = &d.load;
    if (again.published_ms != d.published_ms || strcmp(again.url, d.url) || a->leases != b->leases ||
        a->sessions != b->sessions || a->streaming != b->streaming || a->kv_used_bytes != b->kv_used_bytes ||
        a->kv_capacity_bytes != b->kv_capacity_bytes || a->tokens_per_s_milli != b->tokens_per_s_milli ||
        a->draining != b->draining)
        abort();
    return 0;
}

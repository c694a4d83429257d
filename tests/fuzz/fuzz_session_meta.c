/* fuzz_session_meta.c: libFuzzer target for the gateway's session record
 * (gateway/session_meta.h), which a restore reads from a session file.
 *
 * Any bytes either decode or fail with a message; a decoded record must
 * encode again, and that encoding must decode to the same settings and
 * tokens (a fixed point). ASan's leak check covers the owned fields.
 * The seed corpus is tests/fuzz/corpus/fuzz_session_meta/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/session_meta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t buf[FG_SESSION_META_MAX_BYTES];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_session_meta m, again;
    fg_diag d = {{0}};
    if (fg_session_meta_decode(data, size, &m, &d) != FG_OK) {
        if (!d.msg[0])
            abort(); /* a refusal says why */
        return 0;
    }
    size_t len;
    if (fg_session_meta_encode(&m, buf, sizeof buf, &len, &d) != FG_OK)
        abort(); /* what decodes is in range, so it encodes */
    if (fg_session_meta_decode(buf, len, &again, &d) != FG_OK)
        abort();
    if (strcmp(m.tenant, again.tenant) || m.instructions_len != again.instructions_len ||
        memcmp(m.instructions, again.instructions, m.instructions_len) || m.next_seq != again.next_seq ||
        m.n_stop != again.n_stop || m.conv_known != again.conv_known || m.conv.n != again.conv.n ||
        (m.conv.n && memcmp(m.conv.v, again.conv.v, m.conv.n * sizeof *m.conv.v)))
        abort();
    fg_session_meta_free(&m);
    fg_session_meta_free(&again);
    return 0;
}

/* spec.c: prompt-lookup drafts (see spec.h). Agent turns quote their own
 * context (tool output read back, code edited in place), so the tokens that
 * followed the last occurrence of the current suffix are often the next ones. */
#include "engine/serve/spec.h"

/* Token i of hist followed by next. */
static inline int32_t at(const int32_t *hist, int n_hist, int32_t next, int i)
{
    return i < n_hist ? hist[i] : next;
}

int fg_spec_lookup(const int32_t *hist, int n_hist, int32_t next, int max, int32_t *out)
{
    const int n = n_hist + 1;
    const int lo = n > FG_SPEC_LOOKUP_WINDOW ? n - FG_SPEC_LOOKUP_WINDOW : 0;
    if (max <= 0)
        return 0;
    for (int g = FG_SPEC_LOOKUP_NGRAM; g >= FG_SPEC_LOOKUP_MIN; g--) {
        if (g >= n)
            continue;
        /* Earlier starts p with tokens p .. p+g-1 equal to the last g, most recent first. */
        for (int p = n - g - 1; p >= lo; p--) {
            int k = 0;
            while (k < g && at(hist, n_hist, next, p + k) == at(hist, n_hist, next, n - g + k))
                k++;
            if (k < g)
                continue;
            int m = 0;
            for (int i = p + g; i < n && m < max; i++)
                out[m++] = at(hist, n_hist, next, i);
            return m;
        }
    }
    return 0;
}

/* name.c: see name.h. */
#include "config/base/name.h"

bool fg_name_valid(const char *s, size_t len)
{
    if (len < 1 || len > FG_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        const char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* byte_unicode.c: the GPT-2 byte <-> code point table, built on first use. */
#include "engine/tokenizer/byte_unicode.h"

#include <pthread.h>

static uint16_t byte_to_cp[256];
static int16_t cp_to_byte[324]; /* code points used are < 0x144 */
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static int is_kept_as_itself(int b)
{
    /* '!'..'~', '¡'..'¬', '®'..'ÿ' keep their own code point. */
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

static void build_table(void)
{
    int next = 256;
    for (int i = 0; i < 324; i++)
        cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int cp = is_kept_as_itself(b) ? b : next++;
        byte_to_cp[b] = (uint16_t)cp;
        cp_to_byte[cp] = (int16_t)b;
    }
}

int fg_byte_to_utf8(uint8_t b, char out[4])
{
    pthread_once(&table_once, build_table);
    unsigned cp = byte_to_cp[b];
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

int fg_utf8_to_byte(const char *s, size_t len, size_t *used)
{
    pthread_once(&table_once, build_table);
    if (len == 0)
        return -1;
    const unsigned char *u = (const unsigned char *)s;
    unsigned cp;
    size_t n;
    if (u[0] < 0x80) {
        cp = u[0];
        n = 1;
    } else if ((u[0] & 0xe0) == 0xc0 && len >= 2 && (u[1] & 0xc0) == 0x80) {
        cp = ((unsigned)(u[0] & 0x1f) << 6) | (u[1] & 0x3f);
        n = 2;
    } else {
        return -1;
    }
    if (cp >= 324 || cp_to_byte[cp] < 0)
        return -1;
    *used = n;
    return cp_to_byte[cp];
}

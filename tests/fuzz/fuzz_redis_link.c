/* fuzz_redis_link.c: libFuzzer target for the Redis link's reply parsers
 * (policies/redis_link.h): the CLUSTER SLOTS map, MOVED/ASK redirects, the
 * Sentinel's master address and ROLE, all of which come from the network.
 *
 * The input is RESP (hiredis's reader turns it into replies, as on a real
 * connection); every reply goes through every parser. Whatever a parser
 * accepts must be usable: slot-map owners index the address table,
 * addresses are "host:port" within FG_RLINK_ADDR_MAX, redirect slots are in
 * range. The raw bytes are also read as a redirect and hashed as a key.
 * The seed corpus is tests/fuzz/corpus/fuzz_redis_link/.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "policies/redis_link.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fg_rlink_slotmap map;

static void check_addr(const char *a)
{
    size_t n = strlen(a);
    if (n == 0 || n > FG_RLINK_ADDR_MAX || !strrchr(a, ':'))
        abort();
}

static void check_redirect(const char *s, size_t n)
{
    fg_rlink_redirect rd;
    if (!fg_rlink_parse_redirect(s, n, &rd))
        return;
    if (rd.slot < 0 || rd.slot >= FG_RLINK_SLOTS)
        abort();
    check_addr(rd.addr);
}

static void check_reply(const redisReply *r)
{
    char why[120];
    if (fg_rlink_parse_slots(r, "127.0.0.1", &map, why, sizeof why)) {
        if (map.n_addr == 0 || map.n_addr > FG_RLINK_NODES_MAX)
            abort();
        for (size_t i = 0; i < map.n_addr; i++)
            check_addr(map.addr[i]);
        for (size_t s = 0; s < FG_RLINK_SLOTS; s++)
            if (map.owner[s] != FG_RLINK_NO_OWNER && map.owner[s] >= map.n_addr)
                abort();
    } else if (!why[0]) {
        abort(); /* a refusal says why */
    }
    char addr[FG_RLINK_ADDR_MAX + 1];
    if (fg_rlink_parse_master(r, addr, sizeof addr))
        check_addr(addr);
    (void)fg_rlink_parse_role_master(r);
    if (r->type == REDIS_REPLY_ERROR || r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
        check_redirect(r->str, r->len);
}

/* hiredis 0.14's reader allocates an array or string of any announced
 * length at once (its own limit, not ours): keep lengths to 5 digits. */
static bool lengths_small(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < size; i++) {
        if (data[i] != '*' && data[i] != '$')
            continue;
        size_t d = 0;
        while (i + 1 + d < size && data[i + 1 + d] >= '0' && data[i + 1 + d] <= '9')
            d++;
        if (d > 5)
            return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!lengths_small(data, size))
        return 0;
    check_redirect((const char *)data, size);
    int slot = fg_rlink_key_slot((const char *)data, size);
    if (slot < 0 || slot >= FG_RLINK_SLOTS)
        abort();

    redisReader *rd = redisReaderCreate();
    if (!rd)
        return 0;
    if (redisReaderFeed(rd, (const char *)data, size) == REDIS_OK) {
        for (int i = 0; i < 16; i++) {
            void *reply = NULL;
            if (redisReaderGetReply(rd, &reply) != REDIS_OK || !reply)
                break;
            check_reply(reply);
            freeReplyObject(reply);
        }
    }
    redisReaderFree(rd);
    return 0;
}

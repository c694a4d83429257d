/* redis_link.h: one logical connection to Redis, whichever way it is deployed:
 * a single server, the master of a Sentinel group, or a Redis Cluster.
 *
 * hiredis 0.14 has no cluster or sentinel support; this layer adds what the
 * quota thread needs and every command to Redis goes through it:
 *   - single: one address ("host:port", "[v6]:port" or "/unix/path").
 *   - sentinel: the master's address is asked of the sentinels in turn
 *     (SENTINEL get-master-addr-by-name) and checked with ROLE before use; a
 *     lost connection or a READONLY reply (the old master demoted) closes the
 *     link, so the next connect asks the sentinels again.
 *   - cluster: the slot map comes from CLUSTER SLOTS of the first seed that
 *     answers (then of a master the last map named); each command goes to the master of its key's slot (commands
 *     without a key to any master), on one lazily opened connection per
 *     master, every node's pipeline in flight at once. MOVED updates the map
 *     and resends (the whole map is read again afterwards); ASK resends once
 *     with ASKING to the importing node; at most FG_RLINK_REDIRECTS_MAX
 *     redirects per command.
 * CLUSTERDOWN, TRYAGAIN, MASTERDOWN, LOADING and READONLY replies mean the
 * data cannot be served right now (a failover in progress): the link closes
 * as if the connection were lost, and the caller's recovery path (fail-open
 * backstop, journal, reconnect with backoff) takes over.
 *
 * Threads: a link belongs to one thread (the quota thread); nothing is shared.
 * Every socket has the connect timeout and command timeout given.
 */
#ifndef FG_REDIS_LINK_H
#define FG_REDIS_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "config/fg_error.h"

#define FG_RLINK_SLOTS 16384
#define FG_RLINK_NODES_MAX 64      /* masters of a cluster, or sentinels */
#define FG_RLINK_ADDR_MAX 270      /* "[v6]:port", a host name of 255 bytes, or a socket path */
#define FG_RLINK_REDIRECTS_MAX 5   /* MOVED/ASK hops of one command */

typedef enum fg_rlink_mode {
    FG_RLINK_SINGLE = 0,
    FG_RLINK_SENTINEL,
    FG_RLINK_CLUSTER,
} fg_rlink_mode;

typedef struct fg_rlink_options {
    fg_rlink_mode mode;
    const char *const *addrs;    /* single: one server; sentinel: the sentinels; cluster: seed nodes */
    size_t n_addrs;              /* 1..FG_RLINK_NODES_MAX */
    const char *master_name;     /* sentinel: the monitored master's name */
    int timeout_ms;              /* connect and command timeout, > 0 */
} fg_rlink_options;

typedef struct fg_rlink fg_rlink_t;

/* One command, already in RESP (redisFormatCommandArgv), and the slot of its key. */
typedef struct fg_rlink_cmd {
    const char *resp;
    size_t len;
    int slot;                    /* 0..16383, or -1: no key (any node) */
} fg_rlink_cmd;

/* Copies the options. Errors: FG_ERR_INVALID_ARG (no address, too many, one too long,
 * sentinel without a master name), FG_ERR_NOMEM. Connects nothing. */
fg_err fg_rlink_create(const fg_rlink_options *o, fg_rlink_t **out, fg_diag *d);
void fg_rlink_destroy(fg_rlink_t *l);

/* Connects when closed: single: the server; sentinel: the master the
 * sentinels name; cluster: the slot map. True when up afterwards; false with
 * why filled (what failed, for the operator). */
bool fg_rlink_connect(fg_rlink_t *l, char *why, size_t cap);
bool fg_rlink_up(const fg_rlink_t *l);
void fg_rlink_close(fg_rlink_t *l);

/* Sends n commands, pipelined per node, and stores each reply in replies[i]
 * (caller frees with freeReplyObject). Redirects are followed as above. On a
 * failure (connection lost, timeout, a reply saying the data is unavailable,
 * too many redirects) the link is closed, why filled, the replies not
 * received stay NULL (those received are valid) and false is returned. */
bool fg_rlink_exec(fg_rlink_t *l, const fg_rlink_cmd *cmds, size_t n, redisReply **replies, char *why,
                   size_t cap);

/* Redirects followed and slot-map loads since create (tests and metrics). */
typedef struct fg_rlink_stats {
    uint64_t moved, ask, map_loads, discoveries;  /* discoveries: masters asked of the sentinels */
} fg_rlink_stats;
void fg_rlink_get_stats(const fg_rlink_t *l, fg_rlink_stats *st);

/* ---- reply parsing (pure; fuzzed by tests/fuzz/fuzz_redis_link.c) ---- */

/* The cluster slot of a key: CRC16 (XMODEM) of the key, or of the text
 * between the first '{' and the next '}' when that is not empty. */
int fg_rlink_key_slot(const char *key, size_t len);

typedef struct fg_rlink_redirect {
    bool ask;                    /* ASK (one command, with ASKING) rather than MOVED */
    int slot;
    char addr[FG_RLINK_ADDR_MAX + 1];  /* "host:port" or "[v6]:port" */
} fg_rlink_redirect;

/* "MOVED <slot> <host>:<port>" or "ASK ..." (an error reply's text); false
 * when it is neither or malformed. */
bool fg_rlink_parse_redirect(const char *err, size_t len, fg_rlink_redirect *out);

typedef struct fg_rlink_slotmap {
    uint8_t owner[FG_RLINK_SLOTS];     /* index into addr, or FG_RLINK_NO_OWNER */
    char addr[FG_RLINK_NODES_MAX][FG_RLINK_ADDR_MAX + 1];
    size_t n_addr;
} fg_rlink_slotmap;
#define FG_RLINK_NO_OWNER 0xff

/* Adds addr to the map's masters (once); its index, -1 when the map is full. */
int fg_rlink_slotmap_node(fg_rlink_slotmap *m, const char *addr);
/* A CLUSTER SLOTS reply into m (cleared first); a master announced with an
 * empty host is taken at asked_host. False, with why, when malformed or with
 * more than FG_RLINK_NODES_MAX masters. */
bool fg_rlink_parse_slots(const redisReply *r, const char *asked_host, fg_rlink_slotmap *m, char *why,
                          size_t cap);
/* SENTINEL get-master-addr-by-name's reply (host, port) into "host:port". */
bool fg_rlink_parse_master(const redisReply *r, char *addr, size_t cap);
/* True when ROLE's reply says master. */
bool fg_rlink_parse_role_master(const redisReply *r);

#endif

/* The NCCL id exchange through a real redis-server (a private one on a unix
 * socket): four nodes as threads — three of them started before node 0, so
 * they wait for the id — all end up with node 0's 128-byte blob (a fake
 * ncclUniqueId: no GPU here), and the keys are gone afterwards. Then the
 * failures, each with its clear error: a node whose node 0 never comes, a
 * node 0 whose peers never come, a stored id of the wrong length, an
 * unreachable Redis, a malformed address. */
#include <pthread.h>
#include <string.h>

#include "engine/ep/ep_bootstrap.h"
#include "engine/ep/ep_transport.h"
#include "redis_fixture.h"
#include "tests/unit/fg_test.h"

#define NODES 4

typedef struct node {
    fg_ep_bootstrap_options o;
    uint8_t blob[FG_EP_NCCL_ID_BYTES];
    fg_err err;
    fg_diag diag;
} node;

static void *node_main(void *arg)
{
    node *n = arg;
    n->err = fg_ep_bootstrap_exchange(&n->o, n->blob, sizeof n->blob, &n->diag);
    return NULL;
}

int main(void)
{
    fg_redis_fixture fx;
    if (!fg_redis_start(&fx, false))
        return FG_REDIS_SKIP;
    redisContext *rc = fg_redis_client(&fx);
    CHECK(rc != NULL);

    /* Four nodes; the others first, so they really wait. */
    static node nodes[NODES];
    pthread_t th[NODES];
    for (int i = 0; i < NODES; i++) {
        nodes[i].o = (fg_ep_bootstrap_options){.redis_address = fx.sock, .prefix = "fg:test:job1", .node = i,
                                               .n_nodes = NODES, .timeout_ms = 20000};
        for (int b = 0; b < FG_EP_NCCL_ID_BYTES; b++) /* node 0's is the id; the others' get overwritten */
            nodes[i].blob[b] = i == 0 ? (uint8_t)(b * 7 + 1) : 0;
        nodes[i].blob[5] = i == 0 ? 0 : 0xee; /* a NUL inside the id must survive */
    }
    for (int i = NODES - 1; i >= 1; i--)
        CHECK(pthread_create(&th[i], NULL, node_main, &nodes[i]) == 0);
    fg_sleep_ms(100); /* let them poll an absent key first (not a condition of the test) */
    CHECK(pthread_create(&th[0], NULL, node_main, &nodes[0]) == 0);
    for (int i = 0; i < NODES; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < NODES; i++) {
        CHECK_MSG(nodes[i].err == FG_OK, "node %d: %s", i, nodes[i].diag.msg);
        CHECK_MSG(memcmp(nodes[i].blob, nodes[0].blob, FG_EP_NCCL_ID_BYTES) == 0, "node %d got another id", i);
    }
    CHECK(nodes[1].blob[5] == 0 && nodes[1].blob[6] == 43);
    CHECK(fg_redis_int(rc, "EXISTS fg:test:job1:id") == 0);
    CHECK(fg_redis_int(rc, "EXISTS fg:test:job1:taken") == 0);

    uint8_t blob[FG_EP_NCCL_ID_BYTES] = {0};
    fg_diag d = {{0}};
    /* Node 1 of 2 with no node 0: a timeout naming the key. */
    fg_ep_bootstrap_options o = {.redis_address = fx.sock, .prefix = "fg:test:lonely", .node = 1, .n_nodes = 2,
                                 .timeout_ms = 300};
    CHECK(fg_ep_bootstrap_exchange(&o, blob, sizeof blob, &d) == FG_ERR_IO && strstr(d.msg, "fg:test:lonely:id") &&
          strstr(d.msg, "node 0"));
    /* Node 0 of 3 with no peers: says how many came, and cleans up. */
    o.node = 0;
    o.n_nodes = 3;
    CHECK(fg_ep_bootstrap_exchange(&o, blob, sizeof blob, &d) == FG_ERR_IO && strstr(d.msg, "only 0 of 2"));
    CHECK(fg_redis_int(rc, "EXISTS fg:test:lonely:id") == 0);
    /* An id of the wrong length (another launch's, or not an id at all). */
    redisReply *r = redisCommand(rc, "SET fg:test:short:id abc");
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    o = (fg_ep_bootstrap_options){.redis_address = fx.sock, .prefix = "fg:test:short", .node = 2, .n_nodes = 4,
                                  .timeout_ms = 2000};
    CHECK(fg_ep_bootstrap_exchange(&o, blob, sizeof blob, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "holds 3 bytes"));
    /* One node alone needs no Redis at all. */
    o = (fg_ep_bootstrap_options){.redis_address = "/nonexistent/redis.sock", .prefix = "p", .node = 0, .n_nodes = 1,
                                  .timeout_ms = 100};
    CHECK(fg_ep_bootstrap_exchange(&o, blob, sizeof blob, &d) == FG_OK);
    /* Unreachable and malformed addresses. */
    o.n_nodes = 2;
    CHECK(fg_ep_bootstrap_exchange(&o, blob, sizeof blob, &d) == FG_ERR_IO && strstr(d.msg, "cannot reach redis"));
    o.redis_address = "localhost";
    CHECK(fg_ep_bootstrap_exchange(&o, blob, sizeof blob, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "host:port"));
    o.redis_address = fx.sock;
    o.node = 2;
    CHECK(fg_ep_bootstrap_exchange(&o, blob, sizeof blob, &d) == FG_ERR_INVALID_ARG);

    redisFree(rc);
    fg_redis_stop(&fx);
    return TEST_DONE("test_ep_bootstrap");
}

/* ep_bootstrap.h: how the nodes of an expert-parallel job find each other —
 * node 0 publishes an opaque blob (the ncclUniqueId) in Redis, the others
 * read it.
 *
 * Keys (prefix from topology.bootstrap, e.g. "flashgate:ep:job42"):
 *   <prefix>:id     the blob; node 0 SETs it with an expiry (PX 2 * timeout)
 *   <prefix>:taken  a counter each other node INCRs once it has read the id
 * Node 0 waits until taken reaches n_nodes - 1, then deletes both keys, so a
 * finished bootstrap leaves nothing a later launch could read by mistake; the
 * expiry covers a crashed one. Other nodes poll GET until the id appears.
 * A stale id from a crashed launch under the same prefix could still be read
 * within its expiry: give each launch its own prefix.
 *
 * Thread safety: a call opens and closes its own Redis connection; calls may
 * run from any threads at once (the test runs every node as a thread).
 */
#ifndef FG_EP_BOOTSTRAP_H
#define FG_EP_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"

typedef struct fg_ep_bootstrap_options {
    const char *redis_address;  /* "host:port", "[v6]:port" or an absolute unix socket path */
    const char *prefix;         /* key prefix, not empty */
    int node;                   /* this process's node; 0 publishes */
    int n_nodes;                /* >= 1 */
    int timeout_ms;             /* for the whole exchange, > 0 */
} fg_ep_bootstrap_options;

/* Node 0: stores blob[len] and returns once every other node has taken it.
 * Other nodes: wait for the blob and copy it into blob[len].
 * Errors: FG_ERR_INVALID_ARG (bad options; a stored blob of another length),
 * FG_ERR_IO (Redis unreachable or failing; the timeout passed — the message
 * says which key was waited for and how many nodes took it), FG_ERR_NOMEM. */
fg_err fg_ep_bootstrap_exchange(const fg_ep_bootstrap_options *o, uint8_t *blob, size_t len, fg_diag *diag);

#endif

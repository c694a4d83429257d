/* Expert placement over ranks: contiguous and strided ownership, replicas of
 * the hottest experts on ranks that do not own them, every expert held
 * somewhere, the deterministic choice of holder, and each bad topology
 * refused with the key and the numbers named. */
#include <stdbool.h>
#include <string.h>

#include "engine/ep_shard.h"
#include "tests/unit/fg_test.h"

static fg_ep_shard_t *make(int E, int R, int per_rank, int redundant, fg_ep_placement pl, const int *hot)
{
    fg_ep_shard_options o = {.n_expert = E, .n_ranks = R, .experts_per_rank = per_rank, .redundant = redundant,
                             .placement = pl, .hot = hot};
    fg_ep_shard_t *s = NULL;
    fg_diag d = {{0}};
    fg_err e = fg_ep_shard_create(&o, &s, &d);
    CHECK_MSG(e == FG_OK, "E %d R %d: %s", E, R, d.msg);
    return s;
}

static void expect_error(int E, int R, int per_rank, int redundant, fg_err want, const char *msg)
{
    fg_ep_shard_options o = {.n_expert = E, .n_ranks = R, .experts_per_rank = per_rank, .redundant = redundant};
    fg_ep_shard_t *s = NULL;
    fg_diag d = {{0}};
    fg_err e = fg_ep_shard_create(&o, &s, &d);
    CHECK_MSG(e == want && s == NULL && strstr(d.msg, msg), "E %d R %d epr %d red %d: got %s '%s', want '%s'", E, R,
              per_rank, redundant, fg_err_name(e), d.msg, msg);
}

int main(void)
{
    /* Contiguous: 16 experts over 4 ranks, 4 each in id order. */
    fg_ep_shard_t *s = make(16, 4, 0, 0, FG_EP_CONTIGUOUS, NULL);
    CHECK(fg_ep_shard_slots(s) == 4);
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < 4; j++)
            CHECK(fg_ep_shard_rank_experts(s, r)[j] == r * 4 + j);
    int n;
    const int *h = fg_ep_shard_holders(s, 9, &n);
    CHECK(n == 1 && h[0] == 2);
    CHECK(fg_ep_shard_pick(s, 9, 2, 123) == 2); /* local */
    CHECK(fg_ep_shard_pick(s, 9, 0, 123) == 2);
    CHECK(fg_ep_shard_slot(s, 2, 9) == 1 && fg_ep_shard_slot(s, 1, 9) == -1);
    fg_ep_shard_destroy(s);

    /* Strided: rank r owns e % 4 == r. */
    s = make(16, 4, 4, 0, FG_EP_STRIDED, NULL);
    for (int e = 0; e < 16; e++) {
        h = fg_ep_shard_holders(s, e, &n);
        CHECK(n == 1 && h[0] == e % 4);
    }
    fg_ep_shard_destroy(s);

    /* Replicas: 8 over 4 ranks, 2 per rank, of the hottest experts each rank does not own. */
    const int hot[16] = {5, 0, 9, 1, 2, 3, 4, 6, 7, 8, 10, 11, 12, 13, 14, 15};
    s = make(16, 4, 6, 8, FG_EP_CONTIGUOUS, hot);
    CHECK(fg_ep_shard_slots(s) == 6);
    const int *r0 = fg_ep_shard_rank_experts(s, 0); /* owns 0-3: replicates 5 and 9 */
    CHECK(r0[4] == 5 && r0[5] == 9);
    const int *r1 = fg_ep_shard_rank_experts(s, 1); /* owns 4-7 (5 among them): replicates 0 and 9 */
    CHECK(r1[4] == 0 && r1[5] == 9);
    h = fg_ep_shard_holders(s, 5, &n);
    CHECK(n == 4 && h[0] == 1); /* the owner first, then every other rank */
    /* Every holder of every expert really holds it; every expert has a holder. */
    for (int e = 0; e < 16; e++) {
        h = fg_ep_shard_holders(s, e, &n);
        CHECK(n >= 1);
        for (int i = 0; i < n; i++)
            CHECK(fg_ep_shard_slot(s, h[i], e) >= 0);
        /* The choice is deterministic and always a holder; home wins when it holds the expert. */
        for (unsigned salt = 0; salt < 8; salt++)
            for (int home = 0; home < 4; home++) {
                int p = fg_ep_shard_pick(s, e, home, salt);
                CHECK(p == fg_ep_shard_pick(s, e, home, salt));
                CHECK(fg_ep_shard_slot(s, p, e) >= 0);
                if (fg_ep_shard_slot(s, home, e) >= 0)
                    CHECK(p == home);
            }
    }
    /* Replicas spread a hot expert's load: remote tokens go to more than one holder. */
    bool seen[4] = {false};
    for (unsigned salt = 0; salt < 8; salt++)
        seen[fg_ep_shard_pick(s, 9, 3, salt)] = true; /* 9: owned by rank 2, replicated on 0 and 1 */
    CHECK(seen[0] && seen[1] && seen[2] && !seen[3]);
    for (unsigned salt = 0; salt < 8; salt++)
        CHECK(fg_ep_shard_pick(s, 10, 0, salt) == 2); /* 10: rank 2's, replicated nowhere */
    fg_ep_shard_destroy(s);

    /* One rank holds everything. */
    s = make(16, 1, 16, 0, FG_EP_CONTIGUOUS, NULL);
    CHECK(fg_ep_shard_pick(s, 15, 0, 7) == 0);
    fg_ep_shard_destroy(s);

    /* Bad topologies. */
    expect_error(16, 3, 0, 0, FG_ERR_CONFIG, "topology.ranks (3) does not divide the model's 16 experts");
    expect_error(16, 4, 0, 6, FG_ERR_CONFIG, "topology.redundant_experts (6) must be a multiple of topology.ranks (4)");
    expect_error(16, 4, 0, 52, FG_ERR_CONFIG, "more than the ranks can hold: 13 replicas per rank");
    expect_error(16, 4, 5, 0, FG_ERR_CONFIG, "topology.experts_per_rank (5) does not match topology.ranks (4)");
    expect_error(16, 4, 4, 4, FG_ERR_CONFIG, "plus 1 replicas per rank make 5");
    expect_error(16, 0, 0, 0, FG_ERR_CONFIG, "topology.ranks must be at least 1");
    expect_error(0, 2, 0, 0, FG_ERR_CONFIG, "needs a MoE model");
    expect_error(16, 1, 0, 1, FG_ERR_CONFIG, "more than the ranks can hold");
    const int not_perm[16] = {0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    fg_ep_shard_options o = {.n_expert = 16, .n_ranks = 4, .redundant = 4, .hot = not_perm};
    fg_diag d = {{0}};
    CHECK(fg_ep_shard_create(&o, &s, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "permutation"));
    return TEST_DONE("test_ep_shard");
}

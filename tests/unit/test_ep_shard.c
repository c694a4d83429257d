/* Expert placement over ranks: contiguous and strided ownership (even, and
 * uneven as 256 experts on 72 ranks), replicas of the hottest experts on
 * ranks that do not own them evening the slot counts out, every expert held
 * somewhere, the deterministic choice of holder, and each bad topology
 * refused with the key and the numbers named. */
#include <stdbool.h>
#include <string.h>

#include "engine/ep/ep_shard.h"
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

    /* Replicas: 8 over 4 ranks, 2 per rank, one each for the 8 hottest experts, each on the rank with the most
     * free slots that lacks it (ties: the first after the owner). */
    const int hot[16] = {5, 0, 9, 1, 2, 3, 4, 6, 7, 8, 10, 11, 12, 13, 14, 15};
    s = make(16, 4, 6, 8, FG_EP_CONTIGUOUS, hot);
    CHECK(fg_ep_shard_slots(s) == 6);
    const int want_rep[4][2] = {{4, 6}, {0, 1}, {5, 2}, {9, 3}};
    for (int r = 0; r < 4; r++) {
        CHECK(fg_ep_shard_rank_slots(s, r) == 6 && fg_ep_shard_rank_owned(s, r) == 4);
        CHECK_MSG(fg_ep_shard_rank_experts(s, r)[4] == want_rep[r][0] &&
                      fg_ep_shard_rank_experts(s, r)[5] == want_rep[r][1],
                  "rank %d replicas %d %d", r, fg_ep_shard_rank_experts(s, r)[4], fg_ep_shard_rank_experts(s, r)[5]);
    }
    h = fg_ep_shard_holders(s, 5, &n);
    CHECK(n == 2 && h[0] == 1 && h[1] == 2); /* the owner first, then the replica */
    h = fg_ep_shard_holders(s, 7, &n);
    CHECK(n == 1 && h[0] == 1); /* not among the 8 hottest: no replica */
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
        seen[fg_ep_shard_pick(s, 9, 1, salt)] = true; /* 9: owned by rank 2, replicated on 3 */
    CHECK(!seen[0] && !seen[1] && seen[2] && seen[3]);
    for (unsigned salt = 0; salt < 8; salt++)
        CHECK(fg_ep_shard_pick(s, 10, 0, salt) == 2); /* 10: rank 2's, replicated nowhere */
    fg_ep_shard_destroy(s);

    /* More replicas than experts: the heat order cycles, the hottest get two. 16 over 4 ranks with 24 replicas:
     * 10 slots each. */
    s = make(16, 4, 10, 24, FG_EP_STRIDED, NULL);
    for (int e = 0; e < 16; e++) {
        h = fg_ep_shard_holders(s, e, &n);
        CHECK_MSG(n == (e < 8 ? 3 : 2), "expert %d: %d holders", e, n);
    }
    fg_ep_shard_destroy(s);

    /* Uneven ownership without replicas: 16 over 3 ranks own 6, 5, 5. */
    for (int pl = 0; pl < 2; pl++) {
        s = make(16, 3, 6, 0, (fg_ep_placement)pl, NULL);
        CHECK(fg_ep_shard_slots(s) == 6);
        for (int r = 0; r < 3; r++)
            CHECK(fg_ep_shard_rank_slots(s, r) == (r == 0 ? 6 : 5) && fg_ep_shard_rank_owned(s, r) == (r == 0 ? 6 : 5));
        for (int e = 0; e < 16; e++) {
            h = fg_ep_shard_holders(s, e, &n);
            const int want = pl ? e % 3 : (e < 6 ? 0 : e < 11 ? 1 : 2);
            CHECK_MSG(n == 1 && h[0] == want, "placement %d expert %d on %d", pl, e, h[0]);
        }
        fg_ep_shard_destroy(s);
    }
    /* With 2 replicas (ranks 1 and 2 take one each) every rank holds 6. */
    s = make(16, 3, 0, 2, FG_EP_CONTIGUOUS, NULL);
    for (int r = 0; r < 3; r++)
        CHECK(fg_ep_shard_rank_slots(s, r) == 6);
    CHECK(fg_ep_shard_rank_experts(s, 1)[5] == 0 && fg_ep_shard_rank_experts(s, 2)[5] == 1);
    fg_ep_shard_destroy(s);

    /* DeepSeek-V3 on an NVL72 rack: 256 experts on 72 ranks, contiguous and strided, without and with 32 replicas.
     * Every expert is held, every rank owns 4 (ranks 0-39) or 3 (40-71); with replicas every rank holds 4 slots
     * and the 32 hottest experts have two holders. */
    int heat[256];
    for (int i = 0; i < 256; i++)
        heat[i] = (i * 37 + 11) % 256; /* a permutation: 37 is odd */
    for (int pl = 0; pl < 2; pl++)
        for (int red = 0; red <= 32; red += 32) {
            s = make(256, 72, red ? 4 : 0, red, (fg_ep_placement)pl, red ? heat : NULL);
            CHECK(fg_ep_shard_slots(s) == 4);
            int total = 0;
            for (int r = 0; r < 72; r++) {
                CHECK(fg_ep_shard_rank_owned(s, r) == (r < 40 ? 4 : 3));
                CHECK(fg_ep_shard_rank_slots(s, r) == (red ? 4 : fg_ep_shard_rank_owned(s, r)));
                const int *held = fg_ep_shard_rank_experts(s, r);
                for (int j = 0; j < fg_ep_shard_rank_slots(s, r); j++) {
                    CHECK(fg_ep_shard_slot(s, r, held[j]) == j);
                    if (j >= 1 && j < fg_ep_shard_rank_owned(s, r))
                        CHECK(held[j] > held[j - 1]); /* owned ones ascending */
                }
                total += fg_ep_shard_rank_slots(s, r);
            }
            CHECK(total == 256 + red);
            for (int e = 0; e < 256; e++) {
                h = fg_ep_shard_holders(s, e, &n);
                const int want_owner = pl ? e % 72 : (e < 160 ? e / 4 : 40 + (e - 160) / 3);
                CHECK_MSG(h[0] == want_owner, "placement %d expert %d owner %d, want %d", pl, e, h[0], want_owner);
                int hot_rank = 0;
                while (heat[hot_rank] != e)
                    hot_rank++;
                CHECK_MSG(n == (red && hot_rank < 32 ? 2 : 1), "expert %d (heat %d): %d holders", e, hot_rank, n);
                for (int i = 1; i < n; i++)
                    CHECK(h[i] >= 40 && fg_ep_shard_slot(s, h[i], e) == 3); /* replicas on the ranks owning 3 */
            }
            fg_ep_shard_destroy(s);
        }

    /* One rank holds everything. */
    s = make(16, 1, 16, 0, FG_EP_CONTIGUOUS, NULL);
    CHECK(fg_ep_shard_pick(s, 15, 0, 7) == 0);
    fg_ep_shard_destroy(s);

    /* The heat order as topology.hot_experts gives it: a prefix, the rest in id order. */
    int parsed[16];
    fg_diag pd = {{0}};
    CHECK(fg_ep_shard_parse_hot(" 9, 5,12", 16, parsed, &pd) == FG_OK);
    CHECK(parsed[0] == 9 && parsed[1] == 5 && parsed[2] == 12 && parsed[3] == 0 && parsed[4] == 1 &&
          parsed[12] == 11 && parsed[13] == 13 && parsed[15] == 15);
    CHECK(fg_ep_shard_parse_hot("", 16, parsed, &pd) == FG_OK && parsed[0] == 0 && parsed[15] == 15);
    CHECK(fg_ep_shard_parse_hot("3,16", 16, parsed, &pd) == FG_ERR_CONFIG &&
          strstr(pd.msg, "topology.hot_experts: entry 2 ('16') is not an expert id of this model (0 to 15)"));
    CHECK(fg_ep_shard_parse_hot("3,x", 16, parsed, &pd) == FG_ERR_CONFIG && strstr(pd.msg, "entry 2 ('x')"));
    CHECK(fg_ep_shard_parse_hot("3,4,3", 16, parsed, &pd) == FG_ERR_CONFIG &&
          strstr(pd.msg, "expert 3 is listed twice"));
    CHECK(fg_ep_shard_parse_hot("3;4", 16, parsed, &pd) == FG_ERR_CONFIG && strstr(pd.msg, "expected ','"));
    CHECK(fg_ep_shard_parse_hot("-1", 16, parsed, &pd) == FG_ERR_CONFIG);
    {
        /* 2 replicas on 3 ranks: experts 12 and 7, the listed hottest, get them. */
        fg_ep_shard_options ho = {.n_expert = 16, .n_ranks = 3, .redundant = 2, .hot_list = "12,7"};
        fg_ep_shard_t *hs = NULL;
        CHECK(fg_ep_shard_create(&ho, &hs, &pd) == FG_OK);
        if (hs) {
            h = fg_ep_shard_holders(hs, 12, &n);
            CHECK(n == 2);
            h = fg_ep_shard_holders(hs, 7, &n);
            CHECK(n == 2);
            h = fg_ep_shard_holders(hs, 0, &n);
            CHECK(n == 1);
            fg_ep_shard_destroy(hs);
        }
        ho.hot_list = "12,12";
        CHECK(fg_ep_shard_create(&ho, &hs, &pd) == FG_ERR_CONFIG && hs == NULL &&
              strstr(pd.msg, "topology.hot_experts"));
    }

    /* Bad topologies. */
    expect_error(16, 17, 0, 0, FG_ERR_CONFIG, "topology.ranks (17) is more than the model's 16 experts");
    expect_error(16, 3, 0, 1, FG_ERR_CONFIG,
                 "topology.redundant_experts (1) must even the ranks out: 16 experts + 1 replicas over 3 ranks "
                 "(topology.ranks) leave 2 over; use 0 (no replicas) or 2");
    expect_error(16, 3, 0, 3, FG_ERR_CONFIG, "leave 1 over; use 2 or 5");
    expect_error(256, 72, 0, 72, FG_ERR_CONFIG, "leave 40 over; use 32 or 104");
    expect_error(16, 4, 0, 6, FG_ERR_CONFIG, "topology.redundant_experts (6) must even the ranks out");
    expect_error(16, 4, 0, 52, FG_ERR_CONFIG, "more than the ranks can hold: up to 13 replicas per rank");
    expect_error(16, 4, 5, 0, FG_ERR_CONFIG, "topology.experts_per_rank (5) does not match topology.ranks (4)");
    expect_error(16, 4, 4, 4, FG_ERR_CONFIG, "plus 4 replicas (topology.redundant_experts) make 5 slots");
    expect_error(256, 72, 3, 0, FG_ERR_CONFIG, "256 experts over 72 ranks plus 0 replicas");
    expect_error(16, 0, 0, 0, FG_ERR_CONFIG, "topology.ranks must be at least 1");
    expect_error(0, 2, 0, 0, FG_ERR_CONFIG, "needs a MoE model");
    expect_error(16, 1, 0, 1, FG_ERR_CONFIG, "more than the ranks can hold");
    const int not_perm[16] = {0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    fg_ep_shard_options o = {.n_expert = 16, .n_ranks = 4, .redundant = 4, .hot = not_perm};
    fg_diag d = {{0}};
    CHECK(fg_ep_shard_create(&o, &s, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "permutation"));
    return TEST_DONE("test_ep_shard");
}

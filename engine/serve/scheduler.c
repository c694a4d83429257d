/* scheduler.c: deficit round robin over tenants (see scheduler.h).
 *
 * Items are sorted into tenant groups (tenant, -priority, order); a rotating
 * start offset makes the first tenant served differ between steps so no
 * tenant is always first when the budget runs out mid-round. */
#include "engine/serve/scheduler.h"

#include <stdlib.h>

#define MAX_TENANT_CREDIT 64 /* tenants whose credit is remembered between steps */

typedef struct credit {
    uint32_t tenant;
    int64_t deficit;
    int used; /* seen this step */
} credit;

struct fg_sched {
    int max_items;
    int quantum;
    int *order;        /* [max_items] item indices sorted by tenant group */
    int *group_start;  /* [max_items + 1] */
    int64_t *deficit;  /* [max_items] per group */
    int *cursor;       /* [max_items] next item within each group */
    credit credits[MAX_TENANT_CREDIT];
    int n_credits;
    unsigned rotate;
};

fg_err fg_sched_create(int max_items, int quantum, fg_sched_t **out)
{
    *out = NULL;
    if (max_items < 1 || quantum < 1)
        return FG_ERR_INVALID_ARG;
    fg_sched_t *s = calloc(1, sizeof *s);
    if (!s)
        return FG_ERR_NOMEM;
    s->max_items = max_items;
    s->quantum = quantum;
    s->order = malloc(sizeof(int) * (size_t)max_items);
    s->group_start = malloc(sizeof(int) * (size_t)(max_items + 1));
    s->deficit = malloc(sizeof(int64_t) * (size_t)max_items);
    s->cursor = malloc(sizeof(int) * (size_t)max_items);
    if (!s->order || !s->group_start || !s->deficit || !s->cursor) {
        fg_sched_destroy(s);
        return FG_ERR_NOMEM;
    }
    *out = s;
    return FG_OK;
}

void fg_sched_destroy(fg_sched_t *s)
{
    if (!s)
        return;
    free(s->order);
    free(s->group_start);
    free(s->deficit);
    free(s->cursor);
    free(s);
}

/* Insertion sort keeps this allocation-free and stable; batches are at most a
 * few thousand items and mostly arrive in the same order step after step. */
static int before(const fg_sched_item *a, const fg_sched_item *b)
{
    if (a->tenant != b->tenant)
        return a->tenant < b->tenant;
    if (a->priority != b->priority)
        return a->priority > b->priority;
    return a->order < b->order;
}

static void sort_items(const fg_sched_item *items, int *order, int n)
{
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = 1; i < n; i++) {
        int v = order[i], j = i - 1;
        while (j >= 0 && before(&items[v], &items[order[j]])) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = v;
    }
}

static credit *find_credit(fg_sched_t *s, uint32_t tenant)
{
    for (int i = 0; i < s->n_credits; i++)
        if (s->credits[i].tenant == tenant)
            return &s->credits[i];
    return NULL;
}

int fg_sched_allocate(fg_sched_t *s, fg_sched_item *items, int n, int budget)
{
    if (n > s->max_items)
        n = s->max_items;
    for (int i = 0; i < n; i++)
        items[i].grant = 0;
    if (n == 0 || budget <= 0)
        return 0;
    sort_items(items, s->order, n);

    int n_groups = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || items[s->order[i]].tenant != items[s->order[i - 1]].tenant)
            s->group_start[n_groups++] = i;
    s->group_start[n_groups] = n;

    for (int c = 0; c < s->n_credits; c++)
        s->credits[c].used = 0;
    for (int g = 0; g < n_groups; g++) {
        credit *c = find_credit(s, items[s->order[s->group_start[g]]].tenant);
        s->deficit[g] = c ? c->deficit : 0;
        if (c)
            c->used = 1;
        s->cursor[g] = s->group_start[g];
    }

    int left = budget, progress = 1;
    const int first = (int)(s->rotate++ % (unsigned)n_groups);
    while (left > 0 && progress) {
        progress = 0;
        for (int k = 0; k < n_groups && left > 0; k++) {
            int g = (first + k) % n_groups;
            if (s->cursor[g] == s->group_start[g + 1])
                continue; /* this tenant's demand is met */
            int w = items[s->order[s->group_start[g]]].weight;
            s->deficit[g] += (int64_t)s->quantum * (w > 0 ? w : 1);
            while (s->deficit[g] > 0 && left > 0 && s->cursor[g] < s->group_start[g + 1]) {
                fg_sched_item *it = &items[s->order[s->cursor[g]]];
                int give = it->want - it->grant;
                if (give > left)
                    give = left;
                if (give > s->deficit[g])
                    give = (int)s->deficit[g];
                it->grant += give;
                s->deficit[g] -= give;
                left -= give;
                progress = 1;
                if (it->grant == it->want)
                    s->cursor[g]++;
            }
        }
    }

    /* Remember credit of tenants that still have demand; forget the rest. */
    int kept = 0;
    for (int c = 0; c < s->n_credits; c++)
        if (s->credits[c].used)
            s->credits[kept++] = s->credits[c];
    s->n_credits = kept;
    for (int g = 0; g < n_groups; g++) {
        uint32_t t = items[s->order[s->group_start[g]]].tenant;
        credit *c = find_credit(s, t);
        int64_t d = s->cursor[g] < s->group_start[g + 1] ? s->deficit[g] : 0;
        if (c) {
            c->deficit = d;
        } else if (d != 0 && s->n_credits < MAX_TENANT_CREDIT) {
            s->credits[s->n_credits++] = (credit){t, d, 1};
        }
    }
    return budget - left;
}

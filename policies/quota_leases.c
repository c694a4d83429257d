/* quota_leases.c: what the quota thread keeps per tenant: the leases this
 * instance holds, and the backstop (tenant states sorted by id).
 *
 * Renewal walks them all (the array); settle and close find one by member
 * (the index: linear probing over FNV-1a hashes, deletion by backward shift,
 * so no tombstones). Both stay O(1) per response however many responses a
 * tenant runs here at once.
 */
#include "policies/quota_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/hash64.h"

/* Slot holding member (its value is then non-zero), or the empty slot where it would go. */
static size_t slot_of(const fg_qlease_vec *v, const char *member, uint64_t h)
{
    size_t mask = v->n_slots - 1, i = (size_t)h & mask;
    while (v->slots[i]) {
        const fg_qlease *l = &v->v[v->slots[i] - 1];
        if (l->hash == h && strcmp(l->member, member) == 0)
            break;
        i = (i + 1) & mask;
    }
    return i;
}

static bool rehash(fg_qlease_vec *v, size_t n_slots)
{
    uint32_t *slots = calloc(n_slots, sizeof *slots);
    if (!slots)
        return false;
    free(v->slots);
    v->slots = slots;
    v->n_slots = n_slots;
    for (size_t k = 0; k < v->n; k++) {
        size_t i = (size_t)v->v[k].hash & (n_slots - 1);
        while (slots[i])
            i = (i + 1) & (n_slots - 1);
        slots[i] = (uint32_t)(k + 1);
    }
    return true;
}

fg_qlease *fg_qlease_find(fg_qlease_vec *v, const char *member)
{
    if (!v->n)
        return NULL;
    size_t i = slot_of(v, member, fg_fnv1a64(member, strlen(member)));
    return v->slots[i] ? &v->v[v->slots[i] - 1] : NULL;
}

bool fg_qlease_add(fg_qlease_vec *v, const char *member, int64_t reserved, int64_t day, bool in_redis)
{
    fg_qlease *l = fg_qlease_find(v, member);
    if (!l) {
        if (v->n == v->cap) {
            size_t cap = v->cap ? 2 * v->cap : 8;
            fg_qlease *nv = realloc(v->v, cap * sizeof *nv);
            if (!nv)
                return false;
            v->v = nv;
            v->cap = cap;
        }
        if (2 * (v->n + 1) > v->n_slots && !rehash(v, v->n_slots ? 2 * v->n_slots : 16))
            return false;
        char *m = strdup(member);
        if (!m)
            return false;
        uint64_t h = fg_fnv1a64(member, strlen(member));
        size_t i = slot_of(v, member, h);
        l = &v->v[v->n++];
        l->member = m;
        l->hash = h;
        v->slots[i] = (uint32_t)v->n;
    }
    l->reserved = reserved;
    l->day = day;
    l->in_redis = in_redis;
    return true;
}

/* Empties slot i, shifting back the entries of its probe run that belong before it. */
static void slot_delete(fg_qlease_vec *v, size_t i)
{
    size_t mask = v->n_slots - 1, j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!v->slots[j])
            break;
        size_t home = (size_t)v->v[v->slots[j] - 1].hash & mask;
        /* Move j into the hole at i unless its home lies cyclically in (i, j]. */
        bool stays = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            v->slots[i] = v->slots[j];
            i = j;
        }
    }
    v->slots[i] = 0;
}

bool fg_qlease_take(fg_qlease_vec *v, const char *member, fg_qlease *out)
{
    if (!v->n)
        return false;
    size_t i = slot_of(v, member, fg_fnv1a64(member, strlen(member)));
    if (!v->slots[i])
        return false;
    size_t k = v->slots[i] - 1;
    *out = v->v[k];
    slot_delete(v, i);
    size_t last = v->n - 1;
    if (k != last) {
        /* The last lease moves into k: point its slot there. */
        size_t s = slot_of(v, v->v[last].member, v->v[last].hash);
        v->slots[s] = (uint32_t)(k + 1);
        v->v[k] = v->v[last];
    }
    v->n--;
    return true;
}

void fg_qlease_vec_free(fg_qlease_vec *v)
{
    for (size_t i = 0; i < v->n; i++)
        free(v->v[i].member);
    free(v->v);
    free(v->slots);
    memset(v, 0, sizeof *v);
}

/* ---- tenant states ---- */

static int tenant_cmp(const void *key, const void *elem)
{
    return strcmp((const char *)key, (*(fg_qtenant *const *)elem)->id);
}

fg_qtenant *fg_qtenant_find(struct fg_quota *q, const char *id)
{
    if (!q->n_tenants)
        return NULL;
    fg_qtenant **t = bsearch(id, q->tenants, q->n_tenants, sizeof *q->tenants, tenant_cmp);
    return t ? *t : NULL;
}

fg_qtenant *fg_qtenant_get(struct fg_quota *q, const char *id)
{
    fg_qtenant *t = fg_qtenant_find(q, id);
    if (t)
        return t;
    if (q->n_tenants == q->cap_tenants) {
        size_t cap = q->cap_tenants ? 2 * q->cap_tenants : 16;
        fg_qtenant **v = realloc(q->tenants, cap * sizeof *v);
        if (!v)
            return NULL;
        q->tenants = v;
        q->cap_tenants = cap;
    }
    t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    snprintf(t->id, sizeof t->id, "%s", id);
    fg_backstop_init(&t->backstop);
    size_t at = 0;
    while (at < q->n_tenants && strcmp(q->tenants[at]->id, id) < 0)
        at++;
    memmove(q->tenants + at + 1, q->tenants + at, (q->n_tenants - at) * sizeof *q->tenants);
    q->tenants[at] = t;
    q->n_tenants++;
    return t;
}

void fg_qtenant_free(fg_qtenant *t)
{
    fg_qlease_vec_free(&t->sessions);
    fg_qlease_vec_free(&t->responses);
    free(t);
}

/* list.h: an intrusive doubly-linked list. A struct that can be on a list
 * holds an fg_list link; the list itself is an fg_list head, circular, so an
 * insertion or removal is O(1) and never allocates. fg_list_entry turns a
 * link back into its struct. A link that is on no list points at itself
 * (after fg_list_init or fg_list_remove), so fg_list_linked tells whether it
 * is on one.
 * Thread safety: none; the owner of the list locks it.
 */
#ifndef FG_LIST_H
#define FG_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct fg_list {
    struct fg_list *next, *prev;
} fg_list;

#define fg_list_entry(link, type, member) ((type *)(void *)((char *)(link) - offsetof(type, member)))

/* An empty list head, or a link on no list. */
static inline void fg_list_init(fg_list *l) { l->next = l->prev = l; }

static inline bool fg_list_empty(const fg_list *head) { return head->next == head; }

static inline bool fg_list_linked(const fg_list *link) { return link->next != link; }

static inline void fg_list_insert_after(fg_list *at, fg_list *link)
{
    link->prev = at;
    link->next = at->next;
    at->next->prev = link;
    at->next = link;
}

static inline void fg_list_push_front(fg_list *head, fg_list *link) { fg_list_insert_after(head, link); }

static inline void fg_list_push_back(fg_list *head, fg_list *link) { fg_list_insert_after(head->prev, link); }

/* Unlinks link (which must be on a list) and leaves it on none. */
static inline void fg_list_remove(fg_list *link)
{
    link->prev->next = link->next;
    link->next->prev = link->prev;
    fg_list_init(link);
}

/* The first link, or NULL when the list is empty. */
static inline fg_list *fg_list_first(const fg_list *head) { return head->next == head ? NULL : head->next; }

/* The link after link, or NULL at the end of head's list. */
static inline fg_list *fg_list_next(const fg_list *head, const fg_list *link)
{
    return link->next == head ? NULL : link->next;
}

/* Moves every link of src, in order, to dst (which must be empty); src is left empty. */
static inline void fg_list_take(fg_list *dst, fg_list *src)
{
    fg_list_init(dst);
    if (fg_list_empty(src))
        return;
    dst->next = src->next;
    dst->prev = src->prev;
    dst->next->prev = dst;
    dst->prev->next = dst;
    fg_list_init(src);
}

/* Removes and returns the first link, or NULL when the list is empty. */
static inline fg_list *fg_list_pop_front(fg_list *head)
{
    fg_list *l = fg_list_first(head);
    if (l)
        fg_list_remove(l);
    return l;
}

#endif

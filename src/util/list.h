/* Intrusive doubly-linked list (circular, with a head node). */
#ifndef LR_UTIL_LIST_H
#define LR_UTIL_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct list_node {
    struct list_node *next, *prev;
};

#define LIST_INIT(name)                                                                            \
    {                                                                                              \
        &(name), &(name)                                                                           \
    }
#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))
#define list_entry(node, type, member) container_of(node, type, member)
#define list_for_each_safe(pos, tmp, head)                                                         \
    for (pos = (head)->next, tmp = pos->next; pos != (head); pos = tmp, tmp = pos->next)

static inline void list_init(struct list_node *h)
{
    h->next = h->prev = h;
}

static inline bool list_empty(const struct list_node *h)
{
    return h->next == h;
}

static inline void list_add_tail(struct list_node *h, struct list_node *n)
{
    n->prev = h->prev;
    n->next = h;
    h->prev->next = n;
    h->prev = n;
}

/* n first in the list (a stack, with list_pop). */
static inline void list_add(struct list_node *h, struct list_node *n)
{
    n->next = h->next;
    n->prev = h;
    h->next->prev = n;
    h->next = n;
}

static inline void list_del(struct list_node *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->next = n->prev = n;
}

static inline struct list_node *list_pop(struct list_node *h)
{
    if (list_empty(h))
        return NULL;
    struct list_node *n = h->next;
    list_del(n);
    return n;
}

#endif

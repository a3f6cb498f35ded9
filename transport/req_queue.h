/* req_queue.h - a first-in first-out queue of requests, linked through
 * their next field, held as a head and a tail pointer (both NULL when
 * empty): the per-connection queues of every transport. */
#ifndef HOOP_TRANSPORT_REQ_QUEUE_H
#define HOOP_TRANSPORT_REQ_QUEUE_H

#include "transport/transport.h"

#include <stddef.h>

/* Append req at the tail. */
static inline void hoop_req_queue_push(struct hoop_tp_req **head, struct hoop_tp_req **tail,
                                       struct hoop_tp_req *req)
{
    req->next = NULL;
    if (*tail)
        (*tail)->next = req;
    else
        *head = req;
    *tail = req;
}

/* Take the head off and return it (NULL when empty). */
static inline struct hoop_tp_req *hoop_req_queue_pop(struct hoop_tp_req **head,
                                                     struct hoop_tp_req **tail)
{
    struct hoop_tp_req *req = *head;
    if (req) {
        *head = req->next;
        if (!*head)
            *tail = NULL;
        req->next = NULL;
    }
    return req;
}

#endif

/* ofi_mr.c - memory registrations of the libfabric transport, cached.
 *
 * A registration covers whole pages around the buffer asked for, and is
 * found again for any buffer inside it, so a buffer used again (the ring's
 * slots, a training loop's gradient buffer) is not registered again. At
 * most OFI_MR_CACHED registrations are kept; the least recently used one
 * that no operation holds makes room.
 *
 * Freeing memory and getting new memory at the same address must not leave
 * a registration pointing at the old pages. Providers that reach memory by
 * its virtual address when they move data (the software ones: tcp, shm,
 * sockets, udp, and rxm/rxd over them) hold no pages, so a registration
 * stays right for whatever is mapped at its addresses, and is kept across
 * operations. Any other provider may pin the pages: there a registration
 * lives only while operations hold it, and each new operation registers
 * again, which libfabric's own registration cache, with its memory
 * monitors that see memory being unmapped, answers cheaply and correctly. */
#include "transport/ofi.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OFI_MR_CACHED 256

void hoop_ofi_mr_init(struct ofi_tp *tp)
{
    tp->mr.across_calls = hoop_ofi_prov_software(tp->prov);
    tp->mr.next_key = 1;
}

static void ofi_mr_drop(struct ofi_tp *tp, struct ofi_mr_entry *e)
{
    struct ofi_mr_entry **pp = &tp->mr.head;
    while (*pp && *pp != e)
        pp = &(*pp)->next;
    if (*pp)
        *pp = e->next;
    tp->mr.n--;
    fi_close(&e->mr->fid);
    free(e);
}

static struct ofi_mr_entry *ofi_mr_find(struct ofi_tp *tp, uintptr_t lo, uintptr_t hi)
{
    for (struct ofi_mr_entry *e = tp->mr.head; e; e = e->next)
        if (e->base <= lo && hi <= e->base + e->len)
            return e;
    return NULL;
}

int hoop_ofi_mr_get(struct ofi_tp *tp, const void *buf, size_t len, struct ofi_mr_entry **out)
{
    uintptr_t lo = (uintptr_t)buf, hi = lo + (len ? len : 1);
    struct ofi_mr_entry *e = ofi_mr_find(tp, lo, hi);
    if (!e) {
        const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t base = lo & ~(page - 1), end = (hi + page - 1) & ~(page - 1);
        /* Room: the least recently used registration nobody holds. */
        while (tp->mr.n >= OFI_MR_CACHED) {
            struct ofi_mr_entry *old = NULL;
            for (struct ofi_mr_entry *x = tp->mr.head; x; x = x->next)
                if (!x->refs && (!old || x->last_use < old->last_use))
                    old = x;
            if (!old)
                break;
            ofi_mr_drop(tp, old);
        }
        e = calloc(1, sizeof(*e));
        if (!e)
            return -ENOMEM;
        e->base = base;
        e->len = end - base;
        /* Keys are unique per communicator (each has its own domain); the
         * provider picks them itself where it says so. */
        uint64_t key = tp->mr_mode & FI_MR_PROV_KEY ? 0 : tp->mr.next_key++;
        int rc = fi_mr_reg(tp->domain, (void *)base, e->len, tp->mr_access, 0, key, 0, &e->mr,
                           NULL);
        if (!rc && (tp->mr_mode & FI_MR_ENDPOINT)) {
            if (!(rc = fi_mr_bind(e->mr, &tp->ep->fid, 0)))
                rc = fi_mr_enable(e->mr);
            if (rc)
                fi_close(&e->mr->fid);
        }
        if (rc) {
            hoop_ofi_note(tp, "fi_mr_reg", rc);
            free(e);
            return rc < 0 && rc > -4096 ? rc : -EIO;
        }
        e->desc = fi_mr_desc(e->mr);
        e->key = fi_mr_key(e->mr);
        e->next = tp->mr.head;
        tp->mr.head = e;
        tp->mr.n++;
        tp->mr.regs++;
        HOOP_DEBUG("rank %d: ofi transport: registered %zu bytes at %p (key %llu), %d kept",
                   tp->rank, e->len, (void *)base, (unsigned long long)e->key, tp->mr.n);
    }
    e->refs++;
    e->last_use = ++tp->mr.clock;
    *out = e;
    return 0;
}

int hoop_ofi_mr_req(struct ofi_tp *tp, const struct hoop_tp_req *req, struct ofi_mr_entry **out)
{
    const char *b = req->buf, *r = req->region;
    if (r && b >= r && b + req->len <= r + req->region_len)
        return hoop_ofi_mr_get(tp, req->region, req->region_len, out);
    return hoop_ofi_mr_get(tp, req->buf, req->len, out);
}

void hoop_ofi_mr_put(struct ofi_tp *tp, struct ofi_mr_entry *e)
{
    if (!e)
        return;
    if (--e->refs == 0 && !tp->mr.across_calls)
        ofi_mr_drop(tp, e);
}

void hoop_ofi_mr_fini(struct ofi_tp *tp)
{
    while (tp->mr.head)
        ofi_mr_drop(tp, tp->mr.head);
}

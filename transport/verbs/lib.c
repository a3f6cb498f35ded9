/* lib.c - libibverbs, found at run time.
 *
 * libhoop does not link libibverbs: it is opened with dlopen the first
 * time the verbs transport is probed or created, so that the library
 * loads, and runs its other transports, on a machine without rdma-core.
 * Only the functions libibverbs exports are looked up here; the data path
 * (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) is inline
 * in <infiniband/verbs.h> and calls through the context's operations, so
 * it needs no symbol. The few inline wrappers that fall back to an
 * exported function (ibv_query_port, ibv_query_device_ex, ibv_query_gid_ex)
 * are written again below over the looked-up pointers. */
#include "transport/verbs/verbs.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

struct verbs_lib verbs_ib;
static char verbs_lib_why[256];
static pthread_once_t verbs_lib_once = PTHREAD_ONCE_INIT;

/* The exported functions, by name; the real ibv_query_port and
 * ibv_reg_mr are functions too, behind the header's macros of the same
 * name, so their names are spelled as strings. */
#define VERBS_SYM(field, name)                                                            \
    do {                                                                                  \
        *(void **)&l.field = dlsym(h, name);                                              \
        if (!l.field) {                                                                   \
            snprintf(verbs_lib_why, sizeof(verbs_lib_why),                                \
                     "libibverbs could not be loaded: %s has no %s", so, name);           \
            return; /* left open: closing could strand its exit handlers */               \
        }                                                                                 \
    } while (0)

static void verbs_lib_load(void)
{
    const char *so = "libibverbs.so.1";
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(verbs_lib_why, sizeof(verbs_lib_why),
                 "libibverbs could not be loaded (%s; Debian: apt-get install libibverbs1 "
                 "ibverbs-providers)", e ? e : so);
        return;
    }
    struct verbs_lib l = {0};
    VERBS_SYM(get_device_list, "ibv_get_device_list");
    VERBS_SYM(free_device_list, "ibv_free_device_list");
    VERBS_SYM(get_device_name, "ibv_get_device_name");
    VERBS_SYM(open_device, "ibv_open_device");
    VERBS_SYM(close_device, "ibv_close_device");
    VERBS_SYM(query_device, "ibv_query_device");
    VERBS_SYM(query_port_compat, "ibv_query_port");
    VERBS_SYM(query_gid, "ibv_query_gid");
    VERBS_SYM(query_gid_ex_sized, "_ibv_query_gid_ex");
    VERBS_SYM(alloc_pd, "ibv_alloc_pd");
    VERBS_SYM(dealloc_pd, "ibv_dealloc_pd");
    VERBS_SYM(create_comp_channel, "ibv_create_comp_channel");
    VERBS_SYM(destroy_comp_channel, "ibv_destroy_comp_channel");
    VERBS_SYM(get_cq_event, "ibv_get_cq_event");
    VERBS_SYM(ack_cq_events, "ibv_ack_cq_events");
    VERBS_SYM(create_cq, "ibv_create_cq");
    VERBS_SYM(destroy_cq, "ibv_destroy_cq");
    VERBS_SYM(create_qp, "ibv_create_qp");
    VERBS_SYM(destroy_qp, "ibv_destroy_qp");
    VERBS_SYM(modify_qp, "ibv_modify_qp");
    VERBS_SYM(reg_mr, "ibv_reg_mr");
    VERBS_SYM(dereg_mr, "ibv_dereg_mr");
    VERBS_SYM(port_state_str, "ibv_port_state_str");
    VERBS_SYM(wc_status_str, "ibv_wc_status_str");
    *(void **)&l.reg_dmabuf_mr = dlsym(h, "ibv_reg_dmabuf_mr"); /* optional */
    l.loaded = 1;
    verbs_ib = l;
}

int verbs_lib_load_once(const char **why)
{
    pthread_once(&verbs_lib_once, verbs_lib_load);
    if (!verbs_ib.loaded) {
        *why = verbs_lib_why;
        return -1;
    }
    return 0;
}

/* As <infiniband/verbs.h>'s ___ibv_query_port. */
int verbs_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *pa)
{
    struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
    if (vctx)
        return vctx->query_port(ctx, port, pa, sizeof(*pa));
    memset(pa, 0, sizeof(*pa));
    return verbs_ib.query_port_compat(ctx, port, (struct _compat_ibv_port_attr *)pa);
}

/* As <infiniband/verbs.h>'s ibv_query_device_ex with no input. */
int verbs_query_device_ex(struct ibv_context *ctx, struct ibv_device_attr_ex *a)
{
    struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_device_ex);
    if (vctx) {
        int rc = vctx->query_device_ex(ctx, NULL, a, sizeof(*a));
        if (rc != EOPNOTSUPP && rc != ENOSYS)
            return rc;
    }
    memset(a, 0, sizeof(*a));
    return verbs_ib.query_device(ctx, &a->orig_attr);
}

int verbs_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
                       struct ibv_gid_entry *e)
{
    return verbs_ib.query_gid_ex_sized(ctx, port, index, e, 0, sizeof(*e));
}

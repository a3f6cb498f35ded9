/* notice.c - failure notices over the connections to the root (see
 * bootstrap.h): a hello of kind NOTICE or VERDICT sealed with the job
 * token (auth.h), then a body of status, culprit, the collective's number
 * and the sentence, bounded
 * before it is read. */
#include "bootstrap/bootstrap.h"
#include "common/auth.h"

#include <errno.h>
#include <string.h>

#define NOTICE_HEAD 18 /* u32 status, u32 culprit + 1, u64 seq, u16 sentence length */

int hoop_notice_write(const struct hoop_bootstrap *bs, int fd, int kind, const struct hoop_notice *n,
                      uint64_t deadline_ns)
{
    uint8_t msg[HOOP_HELLO_BYTES + NOTICE_HEAD + HOOP_NOTICE_MAX];
    size_t len = strnlen(n->why, HOOP_NOTICE_MAX);
    struct hoop_hello h = {.kind = (uint16_t)kind, .rank = (uint32_t)bs->rank,
                           .size = (uint32_t)bs->size, .comm_id = bs->comm_id,
                           .body_len = (uint32_t)(NOTICE_HEAD + len)};
    hoop_hello_encode(&h, msg);
    struct hoop_buf b = {.p = msg + HOOP_HELLO_BYTES, .len = NOTICE_HEAD + len};
    hoop_buf_put_u32(&b, (uint32_t)n->status);
    hoop_buf_put_u32(&b, (uint32_t)(n->culprit + 1));
    hoop_buf_put_u64(&b, n->seq);
    hoop_buf_put_u16(&b, (uint16_t)len);
    hoop_buf_put_bytes(&b, n->why, len);
    hoop_auth_seal(bs->token, msg, msg + HOOP_HELLO_BYTES, b.pos);
    return hoop_sock_write_all(fd, msg, HOOP_HELLO_BYTES + b.pos, deadline_ns);
}

int hoop_notice_read(const struct hoop_bootstrap *bs, int fd, int *kind, struct hoop_notice *n,
                     uint64_t deadline_ns)
{
    uint8_t head[HOOP_HELLO_BYTES], body[NOTICE_HEAD + HOOP_NOTICE_MAX];
    int rc = hoop_sock_read_all(fd, head, sizeof(head), deadline_ns);
    if (rc)
        return rc;
    struct hoop_hello h;
    if (hoop_hello_decode(head, sizeof(body), &h))
        return -EPROTO;
    int known = h.kind == HOOP_HELLO_NOTICE || h.kind == HOOP_HELLO_VERDICT ||
                h.kind == HOOP_HELLO_GOODBYE;
    if (!known || (*kind && h.kind != *kind) ||
        h.comm_id != bs->comm_id ||
        h.body_len < NOTICE_HEAD)
        return -EPROTO;
    if ((rc = hoop_sock_read_all(fd, body, h.body_len, deadline_ns)))
        return rc;
    if (!hoop_auth_sealed(bs->token, head, body, h.body_len))
        return -EPROTO;
    struct hoop_buf b = {.p = body, .len = h.body_len};
    uint32_t status = hoop_buf_get_u32(&b);
    uint32_t culprit = hoop_buf_get_u32(&b);
    uint64_t seq = hoop_buf_get_u64(&b);
    uint16_t len = hoop_buf_get_u16(&b);
    /* Bits above the low byte of status are the sender's flags. */
    int goodbye = h.kind == HOOP_HELLO_GOODBYE;
    if (len > HOOP_NOTICE_MAX || len != h.body_len - NOTICE_HEAD ||
        (goodbye ? status != 0 : (status & 0xff) == 0) || (status & 0xff) > HOOP_ERR_ABORTED ||
        status > 0xffff || culprit > (uint32_t)bs->size)
        return -EPROTO;
    *kind = h.kind;
    n->status = (int)status;
    n->culprit = (int)culprit - 1;
    n->seq = seq;
    hoop_buf_get_bytes(&b, n->why, len);
    n->why[len] = '\0';
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)n->why[i] < 0x20)
            n->why[i] = ' ';
    return b.bad ? -EPROTO : 0;
}

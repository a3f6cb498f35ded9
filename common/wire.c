/* wire.c - hello codec and bounded byte buffers. */
#include "common/wire.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void hoop_hello_encode(const struct hoop_hello *h, uint8_t out[HOOP_HELLO_BYTES])
{
    hoop_put_le(out + 0, HOOP_WIRE_MAGIC, 4);
    hoop_put_le(out + 4, HOOP_WIRE_VERSION, 2);
    hoop_put_le(out + 6, h->kind, 2);
    memcpy(out + 8, h->auth, HOOP_TOKEN_BYTES);
    hoop_put_le(out + 40, h->rank, 4);
    hoop_put_le(out + 44, h->size, 4);
    hoop_put_le(out + 48, h->comm_id, 8);
    hoop_put_le(out + 56, h->aux, 4);
    hoop_put_le(out + 60, h->body_len, 4);
}

int hoop_hello_decode(const uint8_t in[HOOP_HELLO_BYTES], size_t max_body, struct hoop_hello *h)
{
    struct hoop_hello t;
    t.magic = (uint32_t)hoop_get_le(in, 4);
    t.version = (uint16_t)hoop_get_le(in + 4, 2);
    t.kind = (uint16_t)hoop_get_le(in + 6, 2);
    if (t.magic != HOOP_WIRE_MAGIC)
        return -EPROTO;
    if (t.version != HOOP_WIRE_VERSION)
        return -EPROTONOSUPPORT;
    if (t.kind < HOOP_HELLO_JOIN || t.kind > HOOP_HELLO_GOODBYE)
        return -EPROTO;
    memcpy(t.auth, in + 8, HOOP_TOKEN_BYTES);
    t.rank = (uint32_t)hoop_get_le(in + 40, 4);
    t.size = (uint32_t)hoop_get_le(in + 44, 4);
    t.comm_id = hoop_get_le(in + 48, 8);
    t.aux = (uint32_t)hoop_get_le(in + 56, 4);
    t.body_len = (uint32_t)hoop_get_le(in + 60, 4);
    if (t.body_len > max_body)
        return -EMSGSIZE;
    *h = t;
    return 0;
}

const char *hoop_hello_strerror(int code)
{
    switch (-code) {
    case EPROTO: return "not a hoop hello (bad magic or kind)";
    case EPROTONOSUPPORT: return "hoop wire protocol version differs";
    case EMSGSIZE: return "announced message length is too large";
    default: return "malformed hello";
    }
}

unsigned hoop_wire_peer_version(const uint8_t in[8])
{
    return (unsigned)hoop_get_le(in + 4, 2);
}

void hoop_wire_version_why(unsigned peer_version, char *out, size_t n)
{
    snprintf(out, n,
             "speaks hoop wire version %u, this rank version %d: run the same hoop build everywhere",
             peer_version, HOOP_WIRE_VERSION);
}

int hoop_token_from_string(const char *s, uint8_t out[HOOP_TOKEN_BYTES])
{
    size_t n = s ? strlen(s) : 0;
    if (n > HOOP_TOKEN_BYTES)
        return -EINVAL;
    memset(out, 0, HOOP_TOKEN_BYTES);
    if (n)
        memcpy(out, s, n);
    return 0;
}

static uint8_t *buf_take(struct hoop_buf *b, size_t n)
{
    if (b->bad || n > b->len - b->pos) {
        b->bad = 1;
        return NULL;
    }
    uint8_t *p = b->p + b->pos;
    b->pos += n;
    return p;
}

#define HOOP_BUF_INT(bits, bytes)                                    \
    void hoop_buf_put_u##bits(struct hoop_buf *b, uint##bits##_t v)  \
    {                                                                \
        uint8_t *p = buf_take(b, bytes);                             \
        if (p)                                                       \
            hoop_put_le(p, v, bytes);                                     \
    }                                                                \
    uint##bits##_t hoop_buf_get_u##bits(struct hoop_buf *b)          \
    {                                                                \
        uint8_t *p = buf_take(b, bytes);                             \
        return p ? (uint##bits##_t)hoop_get_le(p, bytes) : 0;             \
    }

HOOP_BUF_INT(8, 1)
HOOP_BUF_INT(16, 2)
HOOP_BUF_INT(32, 4)
HOOP_BUF_INT(64, 8)

void hoop_buf_put_bytes(struct hoop_buf *b, const void *src, size_t n)
{
    uint8_t *p = buf_take(b, n);
    if (p && n)
        memcpy(p, src, n);
}

void hoop_buf_get_bytes(struct hoop_buf *b, void *dst, size_t n)
{
    uint8_t *p = buf_take(b, n);
    if (p && n)
        memcpy(dst, p, n);
    else if (n)
        memset(dst, 0, n);
}

/* The frame's fields at their fixed offsets (wire.h), in and out of place
 * without a bounded cursor: every collective stamps and checks one per
 * message, so the two stay a handful of loads and stores. */
void hoop_frame_encode(const struct hoop_frame *f, uint8_t out[HOOP_FRAME_BYTES])
{
    hoop_put_le(out + 0, HOOP_FRAME_MAGIC, 4);
    hoop_put_le(out + 4, HOOP_FRAME_VERSION, 2);
    out[6] = f->coll;
    out[7] = f->dtype;
    out[8] = f->op;
    out[9] = out[10] = out[11] = 0;
    hoop_put_le(out + 12, f->root, 4);
    hoop_put_le(out + 16, f->sender, 4);
    hoop_put_le(out + 20, f->step, 4);
    hoop_put_le(out + 24, f->seq, 8);
    hoop_put_le(out + 32, f->count, 8);
    hoop_put_le(out + 40, f->len, 8);
    hoop_put_le(out + 48, f->chunk, 4);
    hoop_put_le(out + 52, f->chunk_bytes, 4);
    hoop_put_le(out + 56, f->blocks, 8);
}

int hoop_frame_decode(const uint8_t in[HOOP_FRAME_BYTES], struct hoop_frame *f)
{
    if (hoop_get_le(in, 4) != HOOP_FRAME_MAGIC || in[9] || in[10] || in[11])
        return -EPROTO;
    if (hoop_get_le(in + 4, 2) != HOOP_FRAME_VERSION)
        return -EPROTONOSUPPORT;
    f->coll = in[6];
    f->dtype = in[7];
    f->op = in[8];
    f->root = (uint32_t)hoop_get_le(in + 12, 4);
    f->sender = (uint32_t)hoop_get_le(in + 16, 4);
    f->step = (uint32_t)hoop_get_le(in + 20, 4);
    f->seq = hoop_get_le(in + 24, 8);
    f->count = hoop_get_le(in + 32, 8);
    f->len = hoop_get_le(in + 40, 8);
    f->chunk = (uint32_t)hoop_get_le(in + 48, 4);
    f->chunk_bytes = (uint32_t)hoop_get_le(in + 52, 4);
    f->blocks = hoop_get_le(in + 56, 8);
    return 0;
}

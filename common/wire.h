/* wire.h - the versioned hello that opens every connection, and a bounded
 * little-endian codec for the messages behind it.
 *
 * Hello (64 bytes, little endian):
 *   0  u32 magic "HOOP"     4  u16 version      6  u16 kind
 *   8  u8  auth[32]        40  u32 rank        44  u32 size
 *  48  u64 comm id         56  u32 aux         60  u32 body length
 * A body of `body length` bytes follows; its reader bounds it before use.
 * The auth field never holds the job token: it is the initiator's nonce on
 * the hello that opens a connection, the seal (a MAC) on a message sent
 * over an authenticated one, zero on a refusal (see auth.h). */
#ifndef HOOP_COMMON_WIRE_H
#define HOOP_COMMON_WIRE_H

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HOOP_WIRE_MAGIC 0x504f4f48u /* bytes 'H' 'O' 'O' 'P' */
#define HOOP_WIRE_VERSION 4 /* 4: data connections prove the token in their first message */
#define HOOP_HELLO_BYTES 64
#define HOOP_TOKEN_BYTES 32

enum hoop_hello_kind {
    HOOP_HELLO_JOIN = 1,   /* rank -> root: body = this rank's info */
    HOOP_HELLO_TABLE = 2,  /* root -> rank: body = every rank's info */
    HOOP_HELLO_REFUSE = 3, /* root -> rank: refused, body = why; rank -> root: cannot join, why */
    HOOP_HELLO_DATA = 4,   /* data connection: aux = socket index */
    HOOP_HELLO_NOTICE = 5, /* rank -> root after a failure: body = a notice */
    HOOP_HELLO_VERDICT = 6,/* root -> rank: body = the notice that names the culprit */
    HOOP_HELLO_GOODBYE = 7,/* rank <-> root: leaving in order (hoop_comm_destroy); status 0 */
};

struct hoop_hello {
    uint32_t magic;
    uint16_t version;
    uint16_t kind;
    uint8_t auth[HOOP_TOKEN_BYTES];
    uint32_t rank;
    uint32_t size;
    uint64_t comm_id;
    uint32_t aux;
    uint32_t body_len;
};

void hoop_hello_encode(const struct hoop_hello *h, uint8_t out[HOOP_HELLO_BYTES]);

/* Decode and check magic, version and kind; 0 or a negative code:
 * -EPROTO (not a hoop hello), -EPROTONOSUPPORT (other version), -EMSGSIZE
 * (body longer than max_body). Fields are filled only on success. */
int hoop_hello_decode(const uint8_t in[HOOP_HELLO_BYTES], size_t max_body, struct hoop_hello *h);

/* A short description of why decode failed, for logs. */
const char *hoop_hello_strerror(int code);

/* The version a hello (or an auth message) says it speaks, whatever it is. */
unsigned hoop_wire_peer_version(const uint8_t in[8]);
/* The sentence for a peer of another wire version ("speaks hoop wire
 * version 1, this rank version 2: run the same hoop build everywhere"). */
void hoop_wire_version_why(unsigned peer_version, char *out, size_t n);

/* Token: the job's secret string (<= 32 bytes), zero-padded. */
int hoop_token_from_string(const char *s, uint8_t out[HOOP_TOKEN_BYTES]);

/* Bounded writer/reader. A write past the end, or a read past the end,
 * sets `bad` and does nothing, so a message is checked once at the end. */
struct hoop_buf {
    uint8_t *p;
    size_t len;
    size_t pos;
    int bad;
};

void hoop_buf_put_u8(struct hoop_buf *b, uint8_t v);
void hoop_buf_put_u16(struct hoop_buf *b, uint16_t v);
void hoop_buf_put_u32(struct hoop_buf *b, uint32_t v);
void hoop_buf_put_u64(struct hoop_buf *b, uint64_t v);
void hoop_buf_put_bytes(struct hoop_buf *b, const void *src, size_t n);
uint8_t hoop_buf_get_u8(struct hoop_buf *b);
uint16_t hoop_buf_get_u16(struct hoop_buf *b);
uint32_t hoop_buf_get_u32(struct hoop_buf *b);
uint64_t hoop_buf_get_u64(struct hoop_buf *b);
void hoop_buf_get_bytes(struct hoop_buf *b, void *dst, size_t n);

/* The header of every data message (64 bytes, little endian):
 *   0  u32 magic "HOPD"     4  u16 version      6  u8 collective  7 u8 dtype
 *   8  u8  op (255: none)   9  u8 zero[3]      12  u32 root (all ones: none)
 *  16  u32 sender          20  u32 step        24  u64 sequence number
 *  32  u64 count           40  u64 payload length
 *  48  u32 chunk           52  u32 chunk size (the sender's, in bytes)
 *  56  u64 blocks (allgatherv: a digest of every rank's block count; 0)
 * The sender says what it is doing; the receiver compares it with what it
 * is doing itself before it trusts a byte of the payload. The collective,
 * count, chunk size and blocks fix the length of every later message of a
 * collective, so once the first matches the rest can be taken whole. 64
 * bytes keep the payload behind it cache-line aligned in the stream. */
#define HOOP_FRAME_MAGIC 0x44504f48u /* bytes 'H' 'O' 'P' 'D' */
#define HOOP_FRAME_VERSION 2
#define HOOP_FRAME_BYTES 64
#define HOOP_FRAME_NONE 0xffffffffu

struct hoop_frame {
    uint8_t coll;
    uint8_t dtype;
    uint8_t op;
    uint32_t root;
    uint32_t sender;
    uint32_t step;
    uint64_t seq;
    uint64_t count;
    uint64_t len;
    uint32_t chunk;
    uint32_t chunk_bytes;
    uint64_t blocks;
};

void hoop_frame_encode(const struct hoop_frame *f, uint8_t out[HOOP_FRAME_BYTES]);
/* 0, or -EPROTO (not a hoop frame) or -EPROTONOSUPPORT (another version);
 * f is filled only on success. */
int hoop_frame_decode(const uint8_t in[HOOP_FRAME_BYTES], struct hoop_frame *f);

/* v as n little-endian bytes at p, and back: the byte order of every
 * message hoop puts on the wire (hellos, frames, the token handshake). The
 * usual widths are one move each (the compiler does not merge the byte
 * loop into one). */
static inline void hoop_put_le(uint8_t *p, uint64_t v, int n)
{
    uint16_t v2;
    uint32_t v4;
    switch (n) {
    case 2: v2 = htole16((uint16_t)v); memcpy(p, &v2, 2); return;
    case 4: v4 = htole32((uint32_t)v); memcpy(p, &v4, 4); return;
    case 8: v = htole64(v); memcpy(p, &v, 8); return;
    default:
        for (int i = 0; i < n; i++)
            p[i] = (uint8_t)(v >> (8 * i));
    }
}

static inline uint64_t hoop_get_le(const uint8_t *p, int n)
{
    uint16_t v2;
    uint32_t v4;
    uint64_t v = 0;
    switch (n) {
    case 2: memcpy(&v2, p, 2); return le16toh(v2);
    case 4: memcpy(&v4, p, 4); return le32toh(v4);
    case 8: memcpy(&v, p, 8); return le64toh(v);
    default:
        for (int i = 0; i < n; i++)
            v |= (uint64_t)p[i] << (8 * i);
        return v;
    }
}

#endif

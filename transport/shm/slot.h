/* slot.h - the layout of a shared-memory segment between two ranks, and
 * the header of each of its slots.
 *
 * One segment carries one direction of one connection: the sender (the
 * producer) writes messages into a ring of nslots slots, the receiver (the
 * consumer) copies them out. Both positions count slots from 0 and only
 * grow; slot i of the ring holds position p where p % nslots == i. A slot
 * is published by its ready word (the last word of its header space): the
 * producer writes the header and the bytes, then p + 1 there; the consumer
 * waits on that word alone, so a small message costs the consumer the
 * slot's lines and nothing else (no shared head index to read first); a
 * compact slot (below) puts a message of a few bytes in the line of the
 * ready word itself. The segment is the peer's memory as much as this
 * rank's: every word read from it is copied out once and checked against
 * what this side knows before it is used (shm_slot_parse,
 * shm_slot_parse_compact), so a corrupted or hostile header is an error
 * with a sentence, never an access outside the mapping. */
#ifndef HOOP_TRANSPORT_SHM_SLOT_H
#define HOOP_TRANSPORT_SHM_SLOT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_SEG_MAGIC 0x4d485348u  /* "HSHM" */
#define SHM_SLOT_MAGIC 0x544c5348u /* "HSLT" */
#define SHM_SLOT_MAGIC_COMPACT 0x434c5348u /* "HSLC" */
/* 2: slots published by their ready word, no head index */
#define SHM_VERSION 2
#define SHM_CTL_BYTES 4096         /* the control words, then the slots */
#define SHM_SLOT_HDR 64
#define SHM_SLOTS_MIN 2
#define SHM_SLOTS_MAX 256
#define SHM_SLOT_BYTES_MIN 4096
#define SHM_SLOT_BYTES_MAX (4u << 20)
/* The longest message a slot header may announce (a ring chunk is at most
 * a few MiB; this only bounds arithmetic). */
#define SHM_MSG_MAX ((uint64_t)1 << 40)

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "shared-memory rings need lock-free 32- and 64-bit atomics");

/* The segment's first page. Each word the two sides write sits on its own
 * cache line; geometry is written once by the producer before the segment
 * is handed over and is only informative: each side uses the geometry the
 * handshake settled (and checked against the segment's size). */
struct shm_ctl {
    uint32_t magic;
    uint32_t version;
    uint32_t nslots;
    uint32_t slot_bytes;
    uint8_t pad0[64 - 16];
    _Atomic uint64_t tail; /* consumer: slots taken */
    uint8_t pad2[64 - 8];
    _Atomic uint32_t cons_wait; /* the consumer sleeps: ring its eventfd on publishing */
    uint8_t pad3[64 - 4];
    _Atomic uint32_t prod_wait; /* the producer sleeps: ring its eventfd on taking */
    uint8_t pad4[64 - 4];
    _Atomic uint32_t prod_closed; /* the producer has cancelled or closed */
    uint8_t pad5[64 - 4];
    _Atomic uint32_t cons_closed; /* the consumer has cancelled or closed */
    uint8_t pad6[64 - 4];
    /* Single copy: the producer writes probe (a value of its choosing);
     * the consumer reads it through process_vm_readv at the producer's
     * address of it, and sets cma_ok when that worked and agreed. */
    uint64_t probe;
    _Atomic uint32_t cma_ok;
    uint8_t pad7[64 - 12];
};
_Static_assert(sizeof(struct shm_ctl) <= SHM_CTL_BYTES, "control words fit their page");

/* flags: the slot holds the request's header only; the payload stays in
 * the producer's memory at `remote`, for the consumer to read with
 * process_vm_readv; the producer's send ends once the slot is taken. */
#define SHM_SLOT_REMOTE 1u
/* flags: the message's first SHM_SLOT_BASE_WORDS(flags) 8-byte words are
 * its request header, all in this (its first) slot: both sides keep them
 * as the base the next compact slot's header is written against. */
#define SHM_SLOT_BASE 2u
#define SHM_SLOT_BASE_WORDS(flags) (((flags) >> 8) & 0xfu)
#define SHM_SLOT_FLAGS_KNOWN (SHM_SLOT_REMOTE | SHM_SLOT_BASE | (0xfu << 8))

/* A slot's header as it is in the segment (SHM_SLOT_HDR bytes, native
 * byte order: both ends are on one machine). A message (the request's
 * header, then its payload) takes one slot or more, in order; a message of
 * no bytes still takes one slot. */
struct shm_slot_hdr {
    uint32_t magic;
    uint32_t flags;   /* 0, or SHM_SLOT_REMOTE */
    uint64_t pos;     /* the ring position this slot was written at */
    uint64_t msg;     /* the message's number on this connection, from 0 */
    uint64_t msg_len; /* the whole message's bytes */
    uint64_t offset;  /* where this slot's bytes start in the message */
    uint32_t len;     /* bytes in this slot */
    uint32_t pad;
    uint64_t remote;  /* SHM_SLOT_REMOTE: the payload's address in the producer */
};
/* Where in a slot's header space its ready word is: p + 1 once the slot
 * holding position p is published (0 in a slot never written). */
#define SHM_SLOT_READY_OFF (SHM_SLOT_HDR - 8)
_Static_assert(sizeof(struct shm_slot_hdr) <= SHM_SLOT_READY_OFF,
               "a slot header fits its space, before the ready word");

/* A compact slot: a whole small message in the slot's first cache line
 * and what follows it, so that a message of a few bytes crosses between
 * the cores as one line (the line the consumer waits on) instead of
 * three (the slot header, the 64-byte frame, the payload). Its request
 * header (words 8-byte words, at most SHM_BASE_WORDS) is written as the
 * words that differ from the base, the last header sent on this
 * connection: mask bit i set means word i follows; the others are the
 * base's. Then the payload. These bytes (the stream) fill the line up to
 * the ready word, then go on in the slot's bytes (SHM_SLOT_HDR on). A
 * small collective's frames differ from the last in their sequence
 * number alone, so its header takes 8 bytes instead of 64. */
struct shm_slot_compact {
    uint32_t magic; /* SHM_SLOT_MAGIC_COMPACT */
    uint32_t msg;   /* the message's number on this connection, its low 32 bits */
    uint16_t len;   /* payload bytes */
    uint8_t words;  /* the request header's words */
    uint8_t mask;   /* the words that follow, the others the base's */
    uint32_t pad;   /* 0 */
};
#define SHM_BASE_WORDS 8
/* The stream's bytes in the first line; the changed words must fit there. */
#define SHM_COMPACT_LINE (SHM_SLOT_READY_OFF - sizeof(struct shm_slot_compact))
/* The longest stream a compact slot carries (the producer's choice: longer
 * messages gain nothing from a header shorter by 56 bytes). */
#define SHM_COMPACT_MAX 1024u
_Static_assert(SHM_COMPACT_LINE == 40, "a compact slot's first line holds 40 bytes of stream");

/* The number of words a compact slot's mask says follow (a table, not
 * __builtin_popcount: without -mpopcnt that is a call into libgcc). */
static inline unsigned shm_mask_words(uint8_t mask)
{
    static const uint8_t bits[16] = {0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4};
    return (unsigned)bits[mask & 15] + bits[mask >> 4];
}

/* What the consumer expects of the next slot. */
struct shm_slot_expect {
    uint64_t pos;
    uint64_t msg;
    uint64_t offset;   /* 0 for a message's first slot */
    uint64_t msg_len;  /* the first slot's, for the later ones (ignored at offset 0) */
    uint32_t slot_bytes;
};

/* The segment's size for a geometry, 0 when the geometry is out of bounds. */
size_t shm_seg_bytes(uint32_t nslots, uint32_t slot_bytes);
/* Where slot i starts in the segment. */
static inline size_t shm_slot_off(uint32_t i, uint32_t slot_bytes)
{
    return SHM_CTL_BYTES + (size_t)i * (SHM_SLOT_HDR + (size_t)slot_bytes);
}

/* The ready word of the slot that starts at slot (SHM_SLOT_READY_OFF). */
static inline _Atomic uint64_t *shm_slot_ready(const uint8_t *slot)
{
    return (_Atomic uint64_t *)(uintptr_t)(slot + SHM_SLOT_READY_OFF);
}

/* What the ready word of the slot that is to hold position pos says while
 * that slot still holds the lap before (nslots a power of two). */
static inline uint64_t shm_slot_before(uint64_t pos, uint32_t nslots)
{
    return pos >= nslots ? pos - nslots + 1 : 0;
}

/* Check a slot header copied out of the segment (raw, SHM_SLOT_HDR bytes)
 * against what the consumer expects: 0 and *out filled, or -EPROTO with
 * why said (what was found, what was expected). */
int shm_slot_parse(const uint8_t raw[SHM_SLOT_HDR], const struct shm_slot_expect *e,
                   struct shm_slot_hdr *out, char *why, size_t n);

/* Check a compact slot's header copied out of the segment (raw, the
 * SHM_SLOT_READY_OFF bytes before the ready word; its magic already seen)
 * against what the consumer expects: 0 and *out filled, or -EPROTO with
 * why said. A compact slot is a whole message: it must come where a
 * message starts. */
int shm_slot_parse_compact(const uint8_t raw[SHM_SLOT_READY_OFF], const struct shm_slot_expect *e,
                           struct shm_slot_compact *out, char *why, size_t n);

#endif

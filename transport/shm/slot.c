/* slot.c - the segment's geometry and the check of a slot header. */
#include "transport/shm/slot.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

size_t shm_seg_bytes(uint32_t nslots, uint32_t slot_bytes)
{
    if (nslots < SHM_SLOTS_MIN || nslots > SHM_SLOTS_MAX || (nslots & (nslots - 1)) ||
        slot_bytes < SHM_SLOT_BYTES_MIN || slot_bytes > SHM_SLOT_BYTES_MAX || slot_bytes % 64)
        return 0;
    return shm_slot_off(nslots, slot_bytes);
}

int shm_slot_parse(const uint8_t raw[SHM_SLOT_HDR], const struct shm_slot_expect *e,
                   struct shm_slot_hdr *out, char *why, size_t n)
{
    struct shm_slot_hdr h;
    memcpy(&h, raw, sizeof(h));
    if (h.magic != SHM_SLOT_MAGIC)
        snprintf(why, n, "slot %llu has no slot header (magic 0x%08x)",
                 (unsigned long long)e->pos, h.magic);
    else if (h.pos != e->pos)
        snprintf(why, n, "slot %llu says it is slot %llu", (unsigned long long)e->pos,
                 (unsigned long long)h.pos);
    else if (h.msg != e->msg)
        snprintf(why, n, "slot %llu carries message %llu where message %llu was due",
                 (unsigned long long)e->pos, (unsigned long long)h.msg,
                 (unsigned long long)e->msg);
    else if (h.len > e->slot_bytes)
        snprintf(why, n, "slot %llu says it holds %u bytes, more than a slot's %u",
                 (unsigned long long)e->pos, h.len, e->slot_bytes);
    else if (h.msg_len > SHM_MSG_MAX)
        snprintf(why, n, "slot %llu announces a message of %llu bytes", (unsigned long long)e->pos,
                 (unsigned long long)h.msg_len);
    else if (h.offset != e->offset || (e->offset && h.msg_len != e->msg_len))
        snprintf(why, n, "slot %llu continues a message at byte %llu of %llu where byte %llu of "
                 "%llu was due", (unsigned long long)e->pos, (unsigned long long)h.offset,
                 (unsigned long long)h.msg_len, (unsigned long long)e->offset,
                 (unsigned long long)(e->offset ? e->msg_len : h.msg_len));
    else if ((h.flags & ~SHM_SLOT_FLAGS_KNOWN) ||
             (!(h.flags & SHM_SLOT_BASE) && SHM_SLOT_BASE_WORDS(h.flags)))
        snprintf(why, n, "slot %llu has unknown flags 0x%x", (unsigned long long)e->pos, h.flags);
    else if ((h.flags & SHM_SLOT_BASE) &&
             (h.offset != 0 || SHM_SLOT_BASE_WORDS(h.flags) > SHM_BASE_WORDS ||
              h.len < 8 * SHM_SLOT_BASE_WORDS(h.flags)))
        snprintf(why, n,
                 "slot %llu says its first %u bytes are a header, at byte %llu, in %u bytes",
                 (unsigned long long)e->pos, 8 * SHM_SLOT_BASE_WORDS(h.flags),
                 (unsigned long long)h.offset, h.len);
    else if ((h.flags & SHM_SLOT_REMOTE) && (h.offset != 0 || h.remote == 0))
        snprintf(why, n, "slot %llu points into the sender's memory at byte %llu of a message, "
                 "or at address 0", (unsigned long long)e->pos, (unsigned long long)h.offset);
    else if (h.offset > h.msg_len || h.len > h.msg_len - h.offset ||
             (h.len == 0 && h.msg_len != 0))
        snprintf(why, n, "slot %llu holds %u bytes at byte %llu of a %llu-byte message",
                 (unsigned long long)e->pos, h.len, (unsigned long long)h.offset,
                 (unsigned long long)h.msg_len);
    /* A message fills every slot but its last (or its payload is read in
     * place), so each slot's bytes start at a multiple of the slot's size:
     * a receive that takes the payload in place gets aligned pieces. */
    else if (!(h.flags & SHM_SLOT_REMOTE) && h.len != e->slot_bytes &&
             h.offset + h.len != h.msg_len)
        snprintf(why, n,
                 "slot %llu holds %u bytes at byte %llu of a %llu-byte message: neither a "
                 "full slot nor the message's end",
                 (unsigned long long)e->pos, h.len, (unsigned long long)h.offset,
                 (unsigned long long)h.msg_len);
    else {
        *out = h;
        return 0;
    }
    return -EPROTO;
}

int shm_slot_parse_compact(const uint8_t raw[SHM_SLOT_READY_OFF], const struct shm_slot_expect *e,
                           struct shm_slot_compact *out, char *why, size_t n)
{
    struct shm_slot_compact h;
    memcpy(&h, raw, sizeof(h));
    unsigned changed = shm_mask_words(h.mask);
    if (h.magic != SHM_SLOT_MAGIC_COMPACT)
        snprintf(why, n, "slot %llu has no compact slot header (magic 0x%08x)",
                 (unsigned long long)e->pos, h.magic);
    else if (h.msg != (uint32_t)e->msg)
        snprintf(why, n, "slot %llu carries message %u (low 32 bits) where message %llu was due",
                 (unsigned long long)e->pos, h.msg, (unsigned long long)e->msg);
    else if (e->offset != 0)
        snprintf(why, n,
                 "slot %llu holds a whole message where byte %llu of a %llu-byte message was due",
                 (unsigned long long)e->pos, (unsigned long long)e->offset,
                 (unsigned long long)e->msg_len);
    else if (h.words > SHM_BASE_WORDS || (h.mask >> h.words) || h.pad)
        snprintf(why, n,
                 "slot %llu says its header has %u words, of which 0x%02x follow (pad 0x%x)",
                 (unsigned long long)e->pos, h.words, h.mask, h.pad);
    else if (8 * changed > SHM_COMPACT_LINE || 8 * changed + h.len > SHM_COMPACT_MAX ||
             8 * changed + h.len > SHM_COMPACT_LINE + (size_t)e->slot_bytes)
        snprintf(why, n,
                 "slot %llu: %u changed header words and %u bytes, more than a compact slot's",
                 (unsigned long long)e->pos, changed, h.len);
    else {
        *out = h;
        return 0;
    }
    return -EPROTO;
}

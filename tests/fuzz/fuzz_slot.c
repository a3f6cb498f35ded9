/* fuzz_slot.c - libFuzzer target: the check of a shared-memory slot
 * header, full or compact (transport/shm/slot.c), what a peer (or a
 * corrupted segment) writes. The input is the 64-byte header, then the
 * consumer's expectation. A header that passes must describe bytes inside the slot
 * and inside the message, at the position and offset expected; one that
 * fails must say why. */
#include "transport/shm/slot.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < SHM_SLOT_HDR + 36)
        return 0;
    struct shm_slot_expect e;
    const uint8_t *x = data + SHM_SLOT_HDR;
    memcpy(&e.pos, x, 8);
    memcpy(&e.msg, x + 8, 8);
    memcpy(&e.offset, x + 16, 8);
    memcpy(&e.msg_len, x + 24, 8);
    memcpy(&e.slot_bytes, x + 32, 4);
    if (e.slot_bytes > SHM_SLOT_BYTES_MAX)
        e.slot_bytes %= SHM_SLOT_BYTES_MAX + 1;
    char why[200];
    why[0] = '\0';
    uint32_t magic;
    memcpy(&magic, data, 4);
    if (magic == SHM_SLOT_MAGIC_COMPACT) {
        struct shm_slot_compact c;
        if (shm_slot_parse_compact(data, &e, &c, why, sizeof(why)) != 0) {
            if (!why[0] || !memchr(why, '\0', sizeof(why)))
                __builtin_trap();
            return 0;
        }
        size_t changed = 0;
        for (int b = 0; b < 8; b++)
            changed += 8 * ((c.mask >> b) & 1u);
        if (c.magic != magic || c.msg != (uint32_t)e.msg || e.offset || c.words > SHM_BASE_WORDS ||
            (c.mask >> c.words) || c.pad || changed > SHM_COMPACT_LINE ||
            changed + c.len > SHM_COMPACT_MAX || changed + c.len > SHM_COMPACT_LINE + e.slot_bytes)
            __builtin_trap();
        return 0;
    }
    struct shm_slot_hdr h;
    if (shm_slot_parse(data, &e, &h, why, sizeof(why)) != 0) {
        if (!why[0] || !memchr(why, '\0', sizeof(why)))
            __builtin_trap();
        return 0;
    }
    if (h.magic != SHM_SLOT_MAGIC || h.pos != e.pos || h.msg != e.msg || h.offset != e.offset ||
        h.len > e.slot_bytes || h.msg_len > SHM_MSG_MAX || h.offset > h.msg_len ||
        h.len > h.msg_len - h.offset || (e.offset && h.msg_len != e.msg_len) ||
        (h.flags & ~SHM_SLOT_FLAGS_KNOWN) ||
        ((h.flags & SHM_SLOT_REMOTE) && (h.offset || !h.remote)) ||
        ((h.flags & SHM_SLOT_BASE) && (h.offset || SHM_SLOT_BASE_WORDS(h.flags) > SHM_BASE_WORDS ||
                                       h.len < 8 * SHM_SLOT_BASE_WORDS(h.flags))) ||
        (!(h.flags & SHM_SLOT_BASE) && SHM_SLOT_BASE_WORDS(h.flags)))
        __builtin_trap();
    return 0;
}

/* fuzz_peers.c - libFuzzer target: the JOIN body and the TABLE the root
 * sends, decoded the way bootstrap/ decodes them. Nothing may be read past
 * the buffer, every accepted entry must be within its bounds, and its host
 * name printable and terminated. */
#include "bootstrap/bootstrap.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct hoop_buf b = {.p = (uint8_t *)data, .len = size};
    for (int i = 0; i < 64 && b.pos < b.len; i++) {
        struct hoop_peer p;
        size_t before = b.pos;
        if (hoop_peer_decode(&b, &p) != 0)
            break;
        if (b.pos <= before || b.pos > b.len || p.handle_len > HOOP_HANDLE_MAX)
            __builtin_trap();
        size_t hl = strnlen(p.host, sizeof(p.host));
        if (hl >= sizeof(p.host))
            __builtin_trap();
        for (size_t k = 0; k < hl; k++)
            if ((unsigned char)p.host[k] < 0x20 || (unsigned char)p.host[k] > 0x7e)
                __builtin_trap();
        /* What was accepted must encode back to the bytes it came from. */
        uint8_t out[HOOP_PEER_WIRE_MAX];
        struct hoop_buf w = {.p = out, .len = sizeof(out)};
        hoop_peer_encode(&w, &p);
        if (w.bad)
            __builtin_trap();
    }
    return 0;
}

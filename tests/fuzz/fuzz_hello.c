/* fuzz_hello.c - libFuzzer target: the hello every connection opens with.
 * A decode that succeeds must describe a valid hoop hello within the bound,
 * and re-encoding it must give back the bytes that were read. */
#include "common/wire.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < HOOP_HELLO_BYTES)
        return 0;
    struct hoop_hello h;
    size_t max_body = size > HOOP_HELLO_BYTES ? data[size - 1] * 64u : 4096;
    if (hoop_hello_decode(data, max_body, &h) != 0)
        return 0;
    if (h.magic != HOOP_WIRE_MAGIC || h.version != HOOP_WIRE_VERSION || h.body_len > max_body ||
        h.kind < HOOP_HELLO_JOIN || h.kind > HOOP_HELLO_GOODBYE)
        __builtin_trap();
    uint8_t again[HOOP_HELLO_BYTES];
    hoop_hello_encode(&h, again);
    if (memcmp(again, data, HOOP_HELLO_BYTES) != 0)
        __builtin_trap();
    return 0;
}

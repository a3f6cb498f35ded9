/* test_wire.c - the hello codec and bounded buffers refuse what they must. */
#include <criterion/criterion.h>

#include "common/wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct hoop_hello sample(void)
{
    struct hoop_hello h = {.kind = HOOP_HELLO_JOIN, .rank = 3, .size = 8,
                           .comm_id = 0x1122334455667788ull, .aux = 7, .body_len = 100};
    memset(h.auth, 0xa5, sizeof(h.auth));
    return h;
}

Test(wire, hello_round_trip)
{
    struct hoop_hello h = sample(), back;
    uint8_t b[HOOP_HELLO_BYTES];
    hoop_hello_encode(&h, b);
    cr_assert_eq(memcmp(b, "HOOP", 4), 0, "magic bytes on the wire are 'HOOP'");
    cr_assert_eq(hoop_hello_decode(b, 100, &back), 0);
    cr_assert_eq(back.rank, 3);
    cr_assert_eq(back.size, 8);
    cr_assert_eq(back.comm_id, 0x1122334455667788ull);
    cr_assert_eq(back.aux, 7);
    cr_assert_eq(back.body_len, 100);
    cr_assert(memcmp(back.auth, h.auth, sizeof(h.auth)) == 0);
}

Test(wire, hello_refuses_garbage)
{
    struct hoop_hello h = sample(), back;
    memset(&back, 0xab, sizeof(back));
    struct hoop_hello untouched = back;
    uint8_t b[HOOP_HELLO_BYTES];

    hoop_hello_encode(&h, b);
    b[0] ^= 1;
    cr_assert_eq(hoop_hello_decode(b, 1000, &back), -EPROTO, "bad magic");

    hoop_hello_encode(&h, b);
    b[4] = 99;
    cr_assert_eq(hoop_hello_decode(b, 1000, &back), -EPROTONOSUPPORT, "other version");

    hoop_hello_encode(&h, b);
    b[6] = 0;
    cr_assert_eq(hoop_hello_decode(b, 1000, &back), -EPROTO, "unknown kind");

    h.body_len = 0xffffffffu;
    hoop_hello_encode(&h, b);
    cr_assert_eq(hoop_hello_decode(b, 4096, &back), -EMSGSIZE, "a huge length is refused");
    cr_assert_eq(memcmp(&back, &untouched, sizeof(back)), 0, "no field set on failure");

    /* Random bytes: never accepted unless they happen to spell the magic. */
    srand(1);
    for (int i = 0; i < 10000; i++) {
        for (int k = 0; k < HOOP_HELLO_BYTES; k++)
            b[k] = (uint8_t)rand();
        cr_assert_neq(hoop_hello_decode(b, 4096, &back), 0);
    }
}

Test(wire, token)
{
    uint8_t a[HOOP_TOKEN_BYTES], b[HOOP_TOKEN_BYTES];
    cr_assert_eq(hoop_token_from_string("0123456789abcdef0123456789abcdef", a), 0, "32 bytes fit");
    cr_assert_eq(hoop_token_from_string("0123456789abcdef0123456789abcdef!", b), -EINVAL,
                 "33 bytes do not");
    hoop_token_from_string("x", a);
    hoop_token_from_string("x", b);
    cr_assert(memcmp(a, b, HOOP_TOKEN_BYTES) == 0, "the same string, the same token");
    cr_assert(a[1] == 0 && a[HOOP_TOKEN_BYTES - 1] == 0, "zero-padded");
    hoop_token_from_string("y", b);
    cr_assert(memcmp(a, b, HOOP_TOKEN_BYTES) != 0);
}

Test(wire, buffer_bounds)
{
    uint8_t mem[10];
    struct hoop_buf w = {.p = mem, .len = sizeof(mem)};
    hoop_buf_put_u64(&w, 0x0102030405060708ull);
    hoop_buf_put_u16(&w, 0xbeef);
    cr_assert_not(w.bad);
    hoop_buf_put_u8(&w, 1);
    cr_assert(w.bad, "writing past the end is caught");

    struct hoop_buf r = {.p = mem, .len = sizeof(mem)};
    cr_assert_eq(hoop_buf_get_u64(&r), 0x0102030405060708ull);
    cr_assert_eq(hoop_buf_get_u16(&r), 0xbeef);
    cr_assert_eq(hoop_buf_get_u32(&r), 0, "reading past the end gives 0");
    cr_assert(r.bad);
    uint8_t big[64];
    memset(big, 0x5a, sizeof(big));
    struct hoop_buf r2 = {.p = mem, .len = 4};
    hoop_buf_get_bytes(&r2, big, sizeof(big));
    cr_assert(r2.bad);
    cr_assert_eq(big[0], 0, "a failed read zeroes its destination");
}

#include "common/status.h"

Test(wire, error_can_wrap_the_previous_error)
{
    hoop_error(HOOP_ERR_PEER, "rank 2: the peer closed");
    hoop_error(HOOP_ERR_PEER, "rank 3: connecting: %s", hoop_last_error());
    cr_assert_str_eq(hoop_last_error(), "rank 3: connecting: rank 2: the peer closed");
}

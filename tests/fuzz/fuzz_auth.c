/* fuzz_auth.c - libFuzzer target: the challenge and proof that follow a
 * hello, a data connection's early proof and its reply, and the seal on
 * messages over an authenticated connection. The
 * input is a hello (64 bytes), then an auth message (64 bytes), then a
 * body. A decode that succeeds must re-encode to the bytes read; no input
 * may pass as a proof or a seal without the token (which it cannot know:
 * a pass means the check is broken); answering a challenge must never
 * read past what it was given. */
#include "common/auth.h"
#include "common/wire.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < HOOP_HELLO_BYTES + HOOP_AUTH_BYTES)
        return 0;
    static const uint8_t token[HOOP_TOKEN_BYTES] = "fuzz-job-token-not-in-the-input";
    const uint8_t *hello = data, *msg = data + HOOP_HELLO_BYTES;
    const uint8_t *body = msg + HOOP_AUTH_BYTES;
    size_t body_len = size - HOOP_HELLO_BYTES - HOOP_AUTH_BYTES;

    struct hoop_auth_msg m;
    int rc = hoop_auth_decode(msg, &m);
    if (rc == 0) {
        if (m.version != HOOP_WIRE_VERSION || m.step < HOOP_AUTH_CHALLENGE ||
            m.step > HOOP_AUTH_REPLY)
            __builtin_trap();
        uint8_t again[HOOP_AUTH_BYTES];
        hoop_auth_encode(&m, again);
        if (memcmp(again, msg, HOOP_AUTH_BYTES) != 0)
            __builtin_trap();
    } else if (rc == -EPROTONOSUPPORT && m.version == HOOP_WIRE_VERSION) {
        __builtin_trap();
    }

    /* As the acceptor: a challenge of ours, the input as the proof. */
    struct hoop_auth_msg chal;
    uint8_t out[HOOP_AUTH_BYTES];
    if (hoop_auth_challenge(token, hello, body, body_len, &chal, out) == 0 &&
        hoop_auth_check(token, hello, body, body_len, &chal, msg) == 0)
        __builtin_trap();

    /* As the initiator: the input as the challenge. */
    rc = hoop_auth_answer(token, hello, body, body_len, msg, out);
    if (rc == 0)
        __builtin_trap(); /* the input proved a token it cannot hold */

    /* A data connection's acceptor (the input as the early proof, against
     * the nonce it names and against a published one) and its initiator
     * (the input as the reply). */
    static const uint8_t published[HOOP_AUTH_NONCE_BYTES] = "fuzz-published-nonce-24";
    if (hoop_auth_verify(token, HOOP_AUTH_EARLY, hello, body, body_len, published, msg) == 0 ||
        hoop_auth_verify(token, HOOP_AUTH_EARLY, hello, body, body_len, msg + 8, msg) == 0 ||
        hoop_auth_verify(token, HOOP_AUTH_REPLY, hello, body, body_len, published, msg) == 0)
        __builtin_trap();

    /* As a reader of sealed messages. */
    if (hoop_auth_sealed(token, hello, body, body_len))
        __builtin_trap();
    return 0;
}

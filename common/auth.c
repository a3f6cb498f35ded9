/* auth.c - challenge, proof and seal over HMAC-SHA256 (nettle). */
#include "common/auth.h"
#include "common/sock.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#define AUTH_OFF 8 /* where the hello's auth field starts */

static const char auth_label[] = "hoop auth 2";
static const char seal_label[] = "hoop seal 2";
static const char derive_label[] = "hoop derive 1";

void hoop_auth_encode(const struct hoop_auth_msg *m, uint8_t out[HOOP_AUTH_BYTES])
{
    hoop_put_le(out, HOOP_AUTH_MAGIC, 4);
    hoop_put_le(out + 4, HOOP_WIRE_VERSION, 2);
    hoop_put_le(out + 6, m->step, 2);
    memcpy(out + 8, m->nonce, HOOP_AUTH_NONCE_BYTES);
    memcpy(out + 32, m->mac, HOOP_MAC_BYTES);
}

int hoop_auth_decode(const uint8_t in[HOOP_AUTH_BYTES], struct hoop_auth_msg *m)
{
    if (hoop_get_le(in, 4) != HOOP_AUTH_MAGIC)
        return -EPROTO;
    m->version = (uint16_t)hoop_get_le(in + 4, 2);
    if (m->version != HOOP_WIRE_VERSION)
        return -EPROTONOSUPPORT;
    m->step = (uint16_t)hoop_get_le(in + 6, 2);
    if (m->step < HOOP_AUTH_CHALLENGE || m->step > HOOP_AUTH_REPLY)
        return -EPROTO;
    memcpy(m->nonce, in + 8, HOOP_AUTH_NONCE_BYTES);
    memcpy(m->mac, in + 32, HOOP_MAC_BYTES);
    return 0;
}

int hoop_auth_random(void *out, size_t n)
{
    uint8_t *p = out;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int hoop_auth_nonce(uint8_t hello[HOOP_HELLO_BYTES])
{
    return hoop_auth_random(hello + AUTH_OFF, HOOP_TOKEN_BYTES);
}

void hoop_auth_mac(const uint8_t token[HOOP_TOKEN_BYTES], char side,
                   const uint8_t hello[HOOP_HELLO_BYTES], const void *body, size_t body_len,
                   const uint8_t nonce[HOOP_AUTH_NONCE_BYTES], uint8_t mac[HOOP_MAC_BYTES])
{
    struct hmac_sha256_ctx c;
    uint8_t s = (uint8_t)side;
    hmac_sha256_set_key(&c, HOOP_TOKEN_BYTES, token);
    hmac_sha256_update(&c, sizeof(auth_label), (const uint8_t *)auth_label);
    hmac_sha256_update(&c, 1, &s);
    hmac_sha256_update(&c, HOOP_HELLO_BYTES, hello);
    if (body_len)
        hmac_sha256_update(&c, body_len, body);
    hmac_sha256_update(&c, HOOP_AUTH_NONCE_BYTES, nonce);
    hmac_sha256_digest(&c, HOOP_MAC_BYTES, mac);
    memset(&c, 0, sizeof(c));
}

int hoop_mac_equal(const uint8_t a[HOOP_MAC_BYTES], const uint8_t b[HOOP_MAC_BYTES])
{
    return memeql_sec(a, b, HOOP_MAC_BYTES) ? 1 : 0;
}

/* Decodes a proof message and checks that it is the step expected. */
static int decode_step(const uint8_t in[HOOP_AUTH_BYTES], enum hoop_auth_step step,
                       struct hoop_auth_msg *m)
{
    int rc = hoop_auth_decode(in, m);
    if (rc == 0 && m->step != step)
        rc = -EPROTO;
    return rc;
}

/* 0 when mac is the token's MAC of side over hello, body and nonce,
 * compared in constant time; -EACCES otherwise. */
static int mac_matches(const uint8_t token[HOOP_TOKEN_BYTES], char side,
                       const uint8_t hello[HOOP_HELLO_BYTES], const void *body, size_t body_len,
                       const uint8_t nonce[HOOP_AUTH_NONCE_BYTES],
                       const uint8_t mac[HOOP_MAC_BYTES])
{
    uint8_t want[HOOP_MAC_BYTES];
    hoop_auth_mac(token, side, hello, body, body_len, nonce, want);
    return hoop_mac_equal(want, mac) ? 0 : -EACCES;
}

int hoop_auth_challenge(const uint8_t token[HOOP_TOKEN_BYTES],
                        const uint8_t hello[HOOP_HELLO_BYTES], const void *body, size_t body_len,
                        struct hoop_auth_msg *m, uint8_t out[HOOP_AUTH_BYTES])
{
    memset(m, 0, sizeof(*m));
    m->version = HOOP_WIRE_VERSION;
    m->step = HOOP_AUTH_CHALLENGE;
    int rc = hoop_auth_random(m->nonce, sizeof(m->nonce));
    if (rc)
        return rc;
    hoop_auth_mac(token, 'A', hello, body, body_len, m->nonce, m->mac);
    hoop_auth_encode(m, out);
    return 0;
}

int hoop_auth_answer(const uint8_t token[HOOP_TOKEN_BYTES], const uint8_t hello[HOOP_HELLO_BYTES],
                     const void *body, size_t body_len, const uint8_t challenge[HOOP_AUTH_BYTES],
                     uint8_t out[HOOP_AUTH_BYTES])
{
    struct hoop_auth_msg c, p = {.version = HOOP_WIRE_VERSION, .step = HOOP_AUTH_PROOF};
    int rc = decode_step(challenge, HOOP_AUTH_CHALLENGE, &c);
    if (rc)
        return rc;
    hoop_auth_mac(token, 'I', hello, body, body_len, c.nonce, p.mac);
    hoop_auth_encode(&p, out);
    return mac_matches(token, 'A', hello, body, body_len, c.nonce, c.mac);
}

int hoop_auth_check(const uint8_t token[HOOP_TOKEN_BYTES], const uint8_t hello[HOOP_HELLO_BYTES],
                    const void *body, size_t body_len, const struct hoop_auth_msg *m,
                    const uint8_t proof[HOOP_AUTH_BYTES])
{
    struct hoop_auth_msg p;
    int rc = decode_step(proof, HOOP_AUTH_PROOF, &p);
    return rc ? rc : mac_matches(token, 'I', hello, body, body_len, m->nonce, p.mac);
}

/* The side whose MAC a data connection's step carries. */
static char step_side(enum hoop_auth_step step)
{
    return step == HOOP_AUTH_EARLY ? 'E' : 'R';
}

void hoop_auth_make(const uint8_t token[HOOP_TOKEN_BYTES], enum hoop_auth_step step,
                    const uint8_t hello[HOOP_HELLO_BYTES], const void *body, size_t body_len,
                    const uint8_t nonce[HOOP_AUTH_NONCE_BYTES], uint8_t out[HOOP_AUTH_BYTES])
{
    struct hoop_auth_msg m = {.version = HOOP_WIRE_VERSION, .step = (uint16_t)step};
    if (step == HOOP_AUTH_EARLY)
        memcpy(m.nonce, nonce, HOOP_AUTH_NONCE_BYTES);
    hoop_auth_mac(token, step_side(step), hello, body, body_len, nonce, m.mac);
    hoop_auth_encode(&m, out);
}

int hoop_auth_verify(const uint8_t token[HOOP_TOKEN_BYTES], enum hoop_auth_step step,
                     const uint8_t hello[HOOP_HELLO_BYTES], const void *body, size_t body_len,
                     const uint8_t nonce[HOOP_AUTH_NONCE_BYTES], const uint8_t in[HOOP_AUTH_BYTES])
{
    struct hoop_auth_msg m;
    int rc = decode_step(in, step, &m);
    if (rc)
        return rc;
    /* The nonce is public (it is in the table): no need to hide how
     * much of it matched. */
    if (step == HOOP_AUTH_EARLY && memcmp(m.nonce, nonce, HOOP_AUTH_NONCE_BYTES) != 0)
        return -ESTALE;
    return mac_matches(token, step_side(step), hello, body, body_len, nonce, m.mac);
}

int hoop_auth_connect(int fd, const uint8_t token[HOOP_TOKEN_BYTES],
                      const uint8_t hello[HOOP_HELLO_BYTES], const void *body, size_t body_len,
                      uint64_t deadline_ns, uint8_t reply[HOOP_AUTH_BYTES])
{
    int rc = hoop_sock_read_all(fd, reply, HOOP_AUTH_BYTES, deadline_ns);
    if (rc)
        return rc;
    if (hoop_get_le(reply, 4) == HOOP_WIRE_MAGIC)
        return 1;
    uint8_t proof[HOOP_AUTH_BYTES];
    int verdict = hoop_auth_answer(token, hello, body, body_len, reply, proof);
    int one = 1; /* the proof must not wait for a delayed acknowledgement */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (verdict && verdict != -EACCES)
        return verdict;
    rc = hoop_sock_write_all(fd, proof, sizeof(proof), deadline_ns);
    return verdict ? verdict : rc;
}

static void seal_mac(const uint8_t token[HOOP_TOKEN_BYTES], const uint8_t head[HOOP_HELLO_BYTES],
                     const void *body, size_t body_len, uint8_t mac[HOOP_MAC_BYTES])
{
    uint8_t h[HOOP_HELLO_BYTES];
    memcpy(h, head, sizeof(h));
    memset(h + AUTH_OFF, 0, HOOP_TOKEN_BYTES);
    struct hmac_sha256_ctx c;
    hmac_sha256_set_key(&c, HOOP_TOKEN_BYTES, token);
    hmac_sha256_update(&c, sizeof(seal_label), (const uint8_t *)seal_label);
    hmac_sha256_update(&c, sizeof(h), h);
    if (body_len)
        hmac_sha256_update(&c, body_len, body);
    hmac_sha256_digest(&c, HOOP_MAC_BYTES, mac);
    memset(&c, 0, sizeof(c));
}

void hoop_auth_seal(const uint8_t token[HOOP_TOKEN_BYTES], uint8_t head[HOOP_HELLO_BYTES],
                    const void *body, size_t body_len)
{
    seal_mac(token, head, body, body_len, head + AUTH_OFF);
}

int hoop_auth_sealed(const uint8_t token[HOOP_TOKEN_BYTES], const uint8_t head[HOOP_HELLO_BYTES],
                     const void *body, size_t body_len)
{
    uint8_t mac[HOOP_MAC_BYTES];
    seal_mac(token, head, body, body_len, mac);
    return hoop_mac_equal(mac, head + AUTH_OFF);
}

void hoop_auth_derive(const uint8_t token[HOOP_TOKEN_BYTES], const void *what, size_t len,
                      uint8_t out[HOOP_TOKEN_BYTES])
{
    struct hmac_sha256_ctx c;
    hmac_sha256_set_key(&c, HOOP_TOKEN_BYTES, token);
    hmac_sha256_update(&c, sizeof(derive_label), (const uint8_t *)derive_label);
    if (len)
        hmac_sha256_update(&c, len, what);
    hmac_sha256_digest(&c, HOOP_TOKEN_BYTES, out);
    memset(&c, 0, sizeof(c));
}

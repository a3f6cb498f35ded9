/* auth.h - proving the job token without sending it.
 *
 * Every connection opens with a hello (wire.h) whose 32-byte auth field is
 * the initiator's fresh nonce. On a join, the acceptor (the root) answers
 * with a challenge, the initiator with a proof. A data connection goes to
 * a rank whose listener published a nonce of its own in the table (sealed
 * by the root): its initiator sends an early proof against that nonce
 * right behind the hello, and the acceptor replies with its own MAC, one
 * message each way and neither waited for before the other is sent. All
 * four are 64 bytes, little endian:
 *   0  u32 magic "HOOA"     4  u16 version      6  u16 step
 *   8  u8  nonce[24] (the acceptor's; zero in a proof)
 *  32  u8  mac[32]
 * Each MAC is HMAC-SHA256 keyed by the token over a label, the side and
 * step that speaks ('A' challenge, 'I' proof, 'E' early proof, 'R'
 * reply), the initiator's whole hello (kind, ranks, size, communicator id,
 * socket index, its nonce), the hello's body and the acceptor's nonce: a
 * recorded exchange proves nothing on another connection (a data
 * connection's early proof, bound to the published nonce, could only be
 * played again to the same listener for the same rank, channel and
 * socket of the same communicator, which the transport takes once). Messages on a
 * connection that has done this (the table, notices) are sealed instead:
 * their auth field is the HMAC of the header, with that field zeroed, and
 * the body. The token itself never leaves the process. */
#ifndef HOOP_COMMON_AUTH_H
#define HOOP_COMMON_AUTH_H

#include "common/wire.h"

#include <stddef.h>
#include <stdint.h>

#define HOOP_AUTH_MAGIC 0x414f4f48u /* bytes 'H' 'O' 'O' 'A' */
#define HOOP_AUTH_BYTES 64
#define HOOP_AUTH_NONCE_BYTES 24
#define HOOP_MAC_BYTES 32

enum hoop_auth_step {
    HOOP_AUTH_CHALLENGE = 1, /* acceptor -> initiator: its nonce and its MAC */
    HOOP_AUTH_PROOF = 2,     /* initiator -> acceptor: its MAC */
    HOOP_AUTH_EARLY = 3,     /* initiator -> acceptor: the published nonce and its MAC */
    HOOP_AUTH_REPLY = 4,     /* acceptor -> initiator, after an early proof: its MAC */
};

struct hoop_auth_msg {
    uint16_t version;
    uint16_t step;
    uint8_t nonce[HOOP_AUTH_NONCE_BYTES];
    uint8_t mac[HOOP_MAC_BYTES];
};

void hoop_auth_encode(const struct hoop_auth_msg *m, uint8_t out[HOOP_AUTH_BYTES]);
/* 0, -EPROTO (not a hoop auth message or an unknown step) or
 * -EPROTONOSUPPORT (another version; m->version is then set). */
int hoop_auth_decode(const uint8_t in[HOOP_AUTH_BYTES], struct hoop_auth_msg *m);

/* Fills n bytes from the kernel's random source; 0 or -errno. */
int hoop_auth_random(void *out, size_t n);

/* Fill the auth field of an encoded hello with a fresh nonce (before it
 * is sent; the hello is then what both MACs bind). 0 or -errno. */
int hoop_auth_nonce(uint8_t hello[HOOP_HELLO_BYTES]);

/* The MAC of side 'A' (acceptor) or 'I' (initiator) for the connection
 * that opened with hello + body and was challenged with nonce. */
void hoop_auth_mac(const uint8_t token[HOOP_TOKEN_BYTES], char side,
                   const uint8_t hello[HOOP_HELLO_BYTES], const void *body, size_t body_len,
                   const uint8_t nonce[HOOP_AUTH_NONCE_BYTES], uint8_t mac[HOOP_MAC_BYTES]);

/* Constant-time comparison of two MACs: 1 when equal. */
int hoop_mac_equal(const uint8_t a[HOOP_MAC_BYTES], const uint8_t b[HOOP_MAC_BYTES]);

/* The acceptor's challenge for a hello + body it has read: a fresh nonce
 * (kept in m for the check of the proof) and its MAC. 0 or -errno. */
int hoop_auth_challenge(const uint8_t token[HOOP_TOKEN_BYTES],
                        const uint8_t hello[HOOP_HELLO_BYTES], const void *body, size_t body_len,
                        struct hoop_auth_msg *m, uint8_t out[HOOP_AUTH_BYTES]);

/* The initiator's answer to a challenge: out is always the proof to send
 * (even when the acceptor's MAC is wrong, so that the acceptor can refuse
 * with its own sentence). 0, -EACCES (the acceptor does not hold this
 * token), -EPROTO (not a challenge) or -EPROTONOSUPPORT (other version). */
int hoop_auth_answer(const uint8_t token[HOOP_TOKEN_BYTES], const uint8_t hello[HOOP_HELLO_BYTES],
                     const void *body, size_t body_len, const uint8_t challenge[HOOP_AUTH_BYTES],
                     uint8_t out[HOOP_AUTH_BYTES]);

/* The acceptor's check of a proof against its challenge m: 0, -EACCES
 * (wrong MAC: another token), -EPROTO or -EPROTONOSUPPORT. */
int hoop_auth_check(const uint8_t token[HOOP_TOKEN_BYTES], const uint8_t hello[HOOP_HELLO_BYTES],
                    const void *body, size_t body_len, const struct hoop_auth_msg *m,
                    const uint8_t proof[HOOP_AUTH_BYTES]);

/* Initiator, blocking until deadline: after sending hello + body, read the
 * acceptor's answer and prove. 0 when both sides proved; 1 when the
 * acceptor answered with a hello instead (a refusal: it is in reply, to be
 * decoded); -EACCES when the acceptor's MAC is wrong (the proof was still
 * sent); -EPROTO, -EPROTONOSUPPORT or the socket's -errno. */
int hoop_auth_connect(int fd, const uint8_t token[HOOP_TOKEN_BYTES],
                      const uint8_t hello[HOOP_HELLO_BYTES], const void *body, size_t body_len,
                      uint64_t deadline_ns, uint8_t reply[HOOP_AUTH_BYTES]);

/* Data connections, against the nonce the acceptor's listener published:
 * the message of step HOOP_AUTH_EARLY (the initiator's early proof for
 * its hello + body) or HOOP_AUTH_REPLY (the acceptor's reply once that
 * proof holds). */
void hoop_auth_make(const uint8_t token[HOOP_TOKEN_BYTES], enum hoop_auth_step step,
                    const uint8_t hello[HOOP_HELLO_BYTES], const void *body, size_t body_len,
                    const uint8_t nonce[HOOP_AUTH_NONCE_BYTES], uint8_t out[HOOP_AUTH_BYTES]);
/* Its check by the other side: 0, -EACCES (wrong MAC: another token),
 * -ESTALE (an early proof against another nonce than this listener's:
 * recorded on another listener or job and played again), -EPROTO (not a
 * message of that step) or -EPROTONOSUPPORT. */
int hoop_auth_verify(const uint8_t token[HOOP_TOKEN_BYTES], enum hoop_auth_step step,
                     const uint8_t hello[HOOP_HELLO_BYTES], const void *body, size_t body_len,
                     const uint8_t nonce[HOOP_AUTH_NONCE_BYTES], const uint8_t in[HOOP_AUTH_BYTES]);

/* Seal a message sent on an authenticated connection: its auth field
 * becomes the MAC of the header (field zeroed) and the body. */
void hoop_auth_seal(const uint8_t token[HOOP_TOKEN_BYTES], uint8_t head[HOOP_HELLO_BYTES],
                    const void *body, size_t body_len);
/* 1 when a received header + body carries a good seal. */
int hoop_auth_sealed(const uint8_t token[HOOP_TOKEN_BYTES], const uint8_t head[HOOP_HELLO_BYTES],
                     const void *body, size_t body_len);

/* A token for a communicator made from another (hoop_comm_split): the
 * HMAC of `what` keyed by the parent's token, so that only ranks holding
 * the parent's token can join, and each group of each split has its own. */
void hoop_auth_derive(const uint8_t token[HOOP_TOKEN_BYTES], const void *what, size_t len,
                      uint8_t out[HOOP_TOKEN_BYTES]);

#endif

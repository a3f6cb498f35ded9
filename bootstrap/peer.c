/* peer.c - this process's identity and the encoding of one rank's info. */
#include "bootstrap/bootstrap.h"
#include "common/hash.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

void hoop_peer_self(struct hoop_peer *p)
{
    memset(p, 0, sizeof(*p));
    gethostname(p->host, sizeof(p->host) - 1);
    p->pid = (uint32_t)getpid();
    /* Host name plus boot id: two machines cloned from one image share a
     * host name but not a boot id. Plus the PID namespace: ranks with one
     * host id can name each other's processes by pid (to watch them). */
    uint64_t h = hoop_fnv1a_str(HOOP_FNV1A_INIT, p->host);
    char boot[64] = {0};
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, boot, sizeof(boot) - 1);
        close(fd);
        if (n > 0)
            h = hoop_fnv1a(h, boot, (size_t)n);
    }
    char ns[64];
    ssize_t nl = readlink("/proc/self/ns/pid", ns, sizeof(ns));
    if (nl > 0)
        h = hoop_fnv1a(h, ns, (size_t)nl);
    p->host_id = h;
}

void hoop_peer_encode(struct hoop_buf *b, const struct hoop_peer *p)
{
    size_t hl = strnlen(p->host, HOOP_HOSTNAME_MAX);
    hoop_buf_put_u64(b, p->host_id);
    hoop_buf_put_u32(b, p->pid);
    hoop_buf_put_u8(b, (uint8_t)hl);
    hoop_buf_put_bytes(b, p->host, hl);
    hoop_buf_put_u16(b, p->handle_len);
    hoop_buf_put_bytes(b, p->handle, p->handle_len);
}

int hoop_peer_decode(struct hoop_buf *b, struct hoop_peer *p)
{
    memset(p, 0, sizeof(*p));
    p->host_id = hoop_buf_get_u64(b);
    p->pid = hoop_buf_get_u32(b);
    uint8_t hl = hoop_buf_get_u8(b);
    if (hl > HOOP_HOSTNAME_MAX)
        return -1;
    hoop_buf_get_bytes(b, p->host, hl);
    p->host[hl] = '\0';
    for (int i = 0; i < hl; i++)
        if ((unsigned char)p->host[i] < 0x20 || (unsigned char)p->host[i] > 0x7e)
            p->host[i] = '?'; /* it will be printed in logs */
    p->handle_len = hoop_buf_get_u16(b);
    if (p->handle_len > HOOP_HANDLE_MAX)
        return -1;
    hoop_buf_get_bytes(b, p->handle, p->handle_len);
    return b->bad ? -1 : 0;
}

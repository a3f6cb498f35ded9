/* status.c - status names and the per-thread error sentence. */
#include "common/status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define HOOP_ERROR_MAX 2048

static _Thread_local char hoop_error_text[HOOP_ERROR_MAX];

hoop_status_t hoop_error(hoop_status_t status, const char *fmt, ...)
{
    /* Format aside first: callers wrap the previous sentence by passing
     * hoop_last_error() itself as an argument. */
    char text[HOOP_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    memcpy(hoop_error_text, text, sizeof(text));
    return status;
}

void hoop_error_append(const char *fmt, ...)
{
    size_t used = strlen(hoop_error_text);
    if (used + 1 >= sizeof(hoop_error_text))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(hoop_error_text + used, sizeof(hoop_error_text) - used, fmt, ap);
    va_end(ap);
}

void hoop_error_clear(void)
{
    hoop_error_text[0] = '\0';
}

const char *hoop_last_error(void)
{
    return hoop_error_text;
}

hoop_status_t hoop_status_from_errno(int neg_errno)
{
    switch (-neg_errno) {
    case EPIPE:
    case ECONNRESET:
    case ECONNREFUSED:
    case ECONNABORTED:
    case ENOTCONN:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
    case ENOLINK: /* TCP's user timeout or keepalive ended the connection */
    case EPROTO:
        return HOOP_ERR_PEER;
    case ETIMEDOUT:
    case ETIME:
        return HOOP_ERR_TIMEOUT;
    case ECANCELED:
    case EINTR: /* a transport's wait woken by the communicator's control */
        return HOOP_ERR_ABORTED;
    case EBADMSG:
        return HOOP_ERR_MISMATCH;
    default:
        return HOOP_ERR_SYSTEM;
    }
}

const char *hoop_status_str(hoop_status_t status)
{
    switch (status) {
    case HOOP_OK: return "success";
    case HOOP_ERR_INVALID: return "invalid argument";
    case HOOP_ERR_TIMEOUT: return "timed out";
    case HOOP_ERR_PEER: return "peer failed";
    case HOOP_ERR_MISMATCH: return "mismatch between ranks";
    case HOOP_ERR_UNSUPPORTED: return "unsupported";
    case HOOP_ERR_SYSTEM: return "system error";
    case HOOP_ERR_ABORTED: return "aborted";
    }
    return "unknown status";
}

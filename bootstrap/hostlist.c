/* hostlist.c - SLURM's compressed host lists ("node[01-04,07],gpu3"): the
 * first host is where task 0 of a step runs, hence the bootstrap root. */
#include "bootstrap/launcher.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* One bracket body "01-04,07" up to its ']'. The first number is handed
 * back as written, since zero padding is part of the host name. Returns
 * the position after ']' or NULL. */
static const char *hostlist_ranges(const char *p, const char **first_lo, size_t *first_len)
{
    int n = 0;
    for (;;) {
        const char *lo = p;
        while (isdigit((unsigned char)*p))
            p++;
        if (p == lo)
            return NULL;
        size_t lo_len = (size_t)(p - lo);
        if (*p == '-') {
            const char *hi = ++p;
            while (isdigit((unsigned char)*p))
                p++;
            if (p == hi || strtoull(lo, NULL, 10) > strtoull(hi, NULL, 10))
                return NULL;
        }
        if (n++ == 0) {
            *first_lo = lo;
            *first_len = lo_len;
        }
        if (*p == ']')
            return p + 1;
        if (*p != ',')
            return NULL;
        p++;
    }
}

int hoop_hostlist_first(const char *list, char *out, size_t outlen)
{
    if (!list || !*list || outlen == 0)
        return -EINVAL;
    size_t w = 0;
    int item = 0, too_long = 0;
    const char *p = list;
    for (;;) {
        const char *start = p;
        while (*p && *p != ',') {
            const char *piece;
            size_t len;
            if (*p == '[') {
                p = hostlist_ranges(p + 1, &piece, &len);
                if (!p)
                    return -EINVAL;
            } else if (*p == ']' || isspace((unsigned char)*p)) {
                return -EINVAL;
            } else {
                piece = p++;
                len = 1;
            }
            if (item == 0) {
                if (w + len >= outlen)
                    too_long = 1;
                else {
                    memcpy(out + w, piece, len);
                    w += len;
                }
            }
        }
        if (p == start)
            return -EINVAL; /* an empty host: ",," or a trailing comma */
        item++;
        if (!*p)
            break;
        p++;
    }
    if (too_long)
        return -ENAMETOOLONG;
    out[w] = '\0';
    return 0;
}

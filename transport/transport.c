/* transport.c - the list of transports built into the library. */
#include "transport/transport.h"

#include <stdio.h>
#include <string.h>

static const struct hoop_transport_ops *const hoop_transports[] = {
    &hoop_transport_tcp,
    &hoop_transport_ofi,
    &hoop_transport_verbs,
};

void hoop_transport_list(char *out, size_t n)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof(hoop_transports) / sizeof(hoop_transports[0]) && used < n; i++)
        used += (size_t)snprintf(out + used, n - used, "%s%s", i ? ", " : "",
                                 hoop_transports[i]->name);
}

const struct hoop_transport_ops *hoop_transport_find(const char *name)
{
    for (size_t i = 0; i < sizeof(hoop_transports) / sizeof(hoop_transports[0]); i++)
        if (strcmp(hoop_transports[i]->name, name) == 0)
            return hoop_transports[i];
    return NULL;
}

const struct hoop_transport_ops *hoop_transport_auto(char *why, size_t n)
{
    const struct hoop_transport_ops *best = &hoop_transport_tcp;
    int best_score = 0;
    size_t used = 0;
    why[0] = '\0';
    for (size_t i = 0; i < sizeof(hoop_transports) / sizeof(hoop_transports[0]); i++) {
        const struct hoop_transport_ops *t = hoop_transports[i];
        char what[256] = "";
        int score = t->probe ? t->probe(what, sizeof(what)) : 0;
        if (used < n)
            used += (size_t)snprintf(why + used, n - used, "%s%s: %s", used ? "; " : "", t->name,
                                     what[0] ? what : score ? "usable" : "not usable");
        if (score > best_score) {
            best = t;
            best_score = score;
        }
    }
    return best;
}

/* transport.c - the list of transports built into the library. */
#include "transport/transport.h"

#include <string.h>

static const struct hoop_transport_ops *const hoop_transports[] = {
    &hoop_transport_tcp,
};

const struct hoop_transport_ops *hoop_transport_find(const char *name)
{
    for (size_t i = 0; i < sizeof(hoop_transports) / sizeof(hoop_transports[0]); i++)
        if (strcmp(hoop_transports[i]->name, name) == 0)
            return hoop_transports[i];
    return NULL;
}

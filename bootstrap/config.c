/* config.c - where rank, size, root and token come from: the config struct
 * first, then HOOP_* variables. */
#include "bootstrap/bootstrap.h"
#include "common/log.h"
#include "common/param.h"
#include "common/status.h"

#include <stdio.h>
#include <string.h>

hoop_status_t hoop_boot_cfg_resolve(const hoop_config_t *cfg, struct hoop_boot_cfg *out)
{
    hoop_status_t st;
    unsigned long long v;
    memset(out, 0, sizeof(*out));
    out->rank = -1;
    out->size = -1;

    out->launcher = "hoop";
    if (cfg && (cfg->rank >= 0 || cfg->size >= 0))
        out->launcher = "config";
    if (cfg && cfg->rank >= 0)
        out->rank = cfg->rank;
    else if (hoop_param_is_set("HOOP_RANK")) {
        if ((st = hoop_param_u64("HOOP_RANK", 0, 1u << 24, &v)))
            return st;
        out->rank = (int)v;
    }
    if (cfg && cfg->size >= 0)
        out->size = cfg->size;
    else if (hoop_param_is_set("HOOP_SIZE")) {
        if ((st = hoop_param_u64("HOOP_SIZE", 1, 1u << 24, &v)))
            return st;
        out->size = (int)v;
    }
    const char *root = (cfg && cfg->root) ? cfg->root : hoop_param_str("HOOP_ROOT");
    const char *token = (cfg && cfg->token) ? cfg->token : hoop_param_str("HOOP_TOKEN");

    if (out->rank < 0 && out->size < 0) {
        if (*root)
            return hoop_error(HOOP_ERR_INVALID,
                              "HOOP_ROOT=%s is set but HOOP_RANK and HOOP_SIZE are not: set both, "
                              "or neither for a one-rank job", root);
        HOOP_WARN("no rank variables found (HOOP_RANK, HOOP_SIZE unset): this is a one-rank job");
        out->rank = 0;
        out->size = 1;
        out->launcher = "none";
    } else if (out->rank < 0 || out->size < 0) {
        return hoop_error(HOOP_ERR_INVALID,
                          "found %s=%d but no %s: set both rank and size (HOOP_RANK, HOOP_SIZE)",
                          out->rank >= 0 ? "rank" : "size", out->rank >= 0 ? out->rank : out->size,
                          out->rank >= 0 ? "size" : "rank");
    }
    if (out->size < 1)
        return hoop_error(HOOP_ERR_INVALID, "size %d is not a number of ranks (>= 1)", out->size);
    if (out->rank >= out->size)
        return hoop_error(HOOP_ERR_INVALID, "rank %d is out of range for size %d (0..%d)",
                          out->rank, out->size, out->size - 1);
    if (out->size > 1) {
        if (!*root)
            return hoop_error(HOOP_ERR_INVALID,
                              "rank %d of %d: no root address: set HOOP_ROOT=host:port (the "
                              "address where rank 0 listens)", out->rank, out->size);
        if ((st = hoop_sock_parse_hostport("HOOP_ROOT", root, out->root_host,
                                           sizeof(out->root_host), &out->root_port)))
            return st;
    }
    if (hoop_token_from_string(token, out->token))
        return hoop_error(HOOP_ERR_INVALID, "the job token (HOOP_TOKEN) is %zu bytes; at most %d",
                          strlen(token), HOOP_TOKEN_BYTES);
    if (cfg && cfg->bootstrap_timeout_s > 0)
        out->timeout_s = cfg->bootstrap_timeout_s;
    else if ((st = hoop_param_double("HOOP_BOOTSTRAP_TIMEOUT", 0.001, 1e7, &out->timeout_s)))
        return st;
    return HOOP_OK;
}

/* config.c - where rank, size, root and token come from: the config struct
 * first, then HOOP_* variables, then another launcher's variables
 * (launcher.c). HOOP_ROOT, HOOP_TOKEN and HOOP_BOOTSTRAP_TIMEOUT override
 * what a launcher gives. */
#include "bootstrap/bootstrap.h"
#include "bootstrap/launcher.h"
#include "common/log.h"
#include "common/param.h"
#include "common/status.h"

#include <stdio.h>
#include <string.h>

/* HOOP_* and a launcher that describe this process differently are a
 * mistake (HOOP_RANK exported to every rank of an mpirun job, say), unless
 * the launcher started only this one process, which then started the job
 * (srun -n 1 hooprun ...). */
static hoop_status_t boot_check_agree(const struct hoop_launch *l, int rank_from_env,
                                      int size_from_env, const struct hoop_boot_cfg *out)
{
    if (!l->name || l->size <= 1)
        return HOOP_OK;
    if (rank_from_env && out->rank != l->rank)
        return hoop_error(HOOP_ERR_INVALID,
                          "HOOP_RANK=%d and %s=%d disagree (%s started this process too): unset "
                          "HOOP_RANK and HOOP_SIZE to take %s's, or make them agree",
                          out->rank, l->rank_var, l->rank, l->name, l->name);
    if (size_from_env && out->size != l->size)
        return hoop_error(HOOP_ERR_INVALID,
                          "HOOP_SIZE=%d and %s=%d disagree (%s started this process too): unset "
                          "HOOP_RANK and HOOP_SIZE to take %s's, or make them agree",
                          out->size, l->size_var, l->size, l->name, l->name);
    return HOOP_OK;
}

hoop_status_t hoop_boot_cfg_resolve(const hoop_config_t *cfg, struct hoop_boot_cfg *out)
{
    hoop_status_t st;
    unsigned long long v;
    memset(out, 0, sizeof(*out));
    out->rank = -1;
    out->size = -1;
    out->local_rank = -1;

    out->launcher = "hoop";
    if (cfg && (cfg->rank >= 0 || cfg->size >= 0))
        out->launcher = "config";
    int rank_from_env = 0, size_from_env = 0;
    if (cfg && cfg->rank >= 0)
        out->rank = cfg->rank;
    else if (hoop_param_is_set("HOOP_RANK")) {
        if ((st = hoop_param_u64("HOOP_RANK", 0, 1u << 24, &v)))
            return st;
        out->rank = (int)v;
        rank_from_env = 1;
    }
    if (cfg && cfg->size >= 0)
        out->size = cfg->size;
    else if (hoop_param_is_set("HOOP_SIZE")) {
        if ((st = hoop_param_u64("HOOP_SIZE", 1, 1u << 24, &v)))
            return st;
        out->size = (int)v;
        size_from_env = 1;
    }
    const char *root = (cfg && cfg->root) ? cfg->root : hoop_param_str("HOOP_ROOT");
    const char *root_name = (cfg && cfg->root) ? "the configured root" : "HOOP_ROOT";
    const char *token = (cfg && cfg->token) ? cfg->token : hoop_param_str("HOOP_TOKEN");
    int token_set = (cfg && cfg->token) || hoop_param_is_set("HOOP_TOKEN");

    struct hoop_launch l;
    hoop_status_t lst = hoop_launch_detect(&l);
    int from_launcher = 0;
    if (out->rank < 0 && out->size < 0) {
        if (lst)
            return lst;
        if (l.name) {
            from_launcher = 1;
            out->rank = l.rank;
            out->size = l.size;
            out->local_rank = l.local_rank;
            out->launcher = l.name;
        } else {
            if (*root)
                return hoop_error(HOOP_ERR_INVALID,
                                  "%s=%s is set but no rank and size are: set HOOP_RANK and "
                                  "HOOP_SIZE, or start the job with a launcher hoop reads "
                                  "(hooprun, horovodrun, torchrun, mpirun, srun), or unset it "
                                  "for a one-rank job", root_name, root);
            HOOP_WARN("no rank variables found (HOOP_RANK, HOOP_SIZE unset, and none of "
                      "Horovod, torchrun, OpenMPI, PMI or SLURM): this is a one-rank job");
            out->rank = 0;
            out->size = 1;
            out->launcher = "none";
        }
    } else if (out->rank < 0 || out->size < 0) {
        return hoop_error(HOOP_ERR_INVALID,
                          "found %s=%d but no %s: set both rank and size (HOOP_RANK, HOOP_SIZE)",
                          out->rank >= 0 ? "rank" : "size", out->rank >= 0 ? out->rank : out->size,
                          out->rank >= 0 ? "size" : "rank");
    } else if (lst == HOOP_OK) {
        if ((st = boot_check_agree(&l, rank_from_env, size_from_env, out)))
            return st;
    } else {
        HOOP_DEBUG("ignoring a launcher's variables, HOOP_RANK/HOOP_SIZE or the config win: %s",
                   hoop_last_error());
        hoop_error_clear();
    }
    if (out->size < 1)
        return hoop_error(HOOP_ERR_INVALID, "size %d is not a number of ranks (>= 1)", out->size);
    if (out->rank >= out->size)
        return hoop_error(HOOP_ERR_INVALID, "rank %d is out of range for size %d (0..%d)",
                          out->rank, out->size, out->size - 1);
    if (out->size > 1) {
        const char *root_from = root_name;
        if (!*root && from_launcher) {
            if (!l.root[0])
                return hoop_error(HOOP_ERR_INVALID, "rank %d of %d (from %s): no root address: %s",
                                  out->rank, out->size, l.name, l.no_root);
            root = l.root;
            root_from = l.root_from;
        }
        if (!*root)
            return hoop_error(HOOP_ERR_INVALID,
                              "rank %d of %d: no root address: set HOOP_ROOT=host:port (the "
                              "address where rank 0 listens)", out->rank, out->size);
        if ((st = hoop_sock_parse_hostport(root == l.root ? l.name : root_name, root,
                                           out->root_host, sizeof(out->root_host),
                                           &out->root_port)))
            return st;
        const char *from = from_launcher ? l.name : out->launcher;
        char vars[96];
        snprintf(vars, sizeof(vars), "%s, %s", from_launcher ? l.rank_var : "HOOP_RANK",
                 from_launcher ? l.size_var : "HOOP_SIZE");
        char local[32] = "";
        if (out->local_rank >= 0)
            snprintf(local, sizeof(local), " (local rank %d)", out->local_rank);
        const char *token_from = cfg && cfg->token ? "from the config"
                                 : token_set       ? "from HOOP_TOKEN"
                                 : from_launcher && l.token[0] ? "from the job's identity"
                                                               : "none";
        HOOP_INFO("rank %d of %d%s from %s (%s); root %s (%s); token %s", out->rank, out->size,
                  local, from, strcmp(from, "config") == 0 ? "hoop_config_t" : vars, root,
                  root_from, token_from);
    } else if (from_launcher) {
        HOOP_WARN("%s says this is a one-rank job (%s=1): nothing will be exchanged", l.name,
                  l.size_var);
    }
    if (!token_set && from_launcher)
        token = l.token;
    if (hoop_token_from_string(token, out->token))
        return hoop_error(HOOP_ERR_INVALID, "the job token (HOOP_TOKEN) is %zu bytes; at most %d",
                          strlen(token), HOOP_TOKEN_BYTES);
    if (cfg && cfg->bootstrap_timeout_s > 0)
        out->timeout_s = cfg->bootstrap_timeout_s;
    else if ((st = hoop_param_double("HOOP_BOOTSTRAP_TIMEOUT", 0.001, 1e7, &out->timeout_s)))
        return st;
    return HOOP_OK;
}

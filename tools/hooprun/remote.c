/* remote.c - ranks on other hosts: the remote shell's command line, and the
 * wrapper that stops the remote rank when its lifeline ends. */
#include "tools/hooprun/hooprun.h"

/* How a remote rank runs, as an sh script with the program and its
 * arguments as "$@". A remote shell started without a terminal sends no
 * signal to the remote side when its client is killed or its connection
 * drops, and a terminal (ssh -tt) would mangle the output; so the client's
 * stdin is the rank's lifeline instead. hooprun writes the job token into it
 * first, then keeps it open for the life of the rank. Once it closes - hooprun
 * stops the job, or hooprun, the client or the connection dies - the watcher
 * sees EOF and sends SIGTERM, then SIGKILL 3 s later, to the program's
 * process group (its own session under setsid, so that its descendants go
 * too). When the program ends by itself, whatever is left in its group is
 * killed as well: it would hold the connection open, and a local rank's
 * leftovers are not waited for either. The watcher's trap takes its sleep
 * along when it is told to go, so that nothing outlives the rank.
 *
 * The script itself may be sent SIGTERM or SIGHUP: a remote shell that runs
 * the command in the client's own process (a container's exec, or a local
 * stand-in) passes on hooprun's death signal, and an sshd may hang up. Until
 * the watcher runs, dying then would leave the program with nobody to stop
 * it, so the script ignores both (the program gets them back at their
 * defaults); once the watcher runs, either is passed on to the program, and
 * the script waits on until the program is gone.
 *
 * The token travels on stdin rather than in the command line, where every
 * user of either host could read it with ps. The program's own stdin is
 * /dev/null, and, as for any command that sh runs in the background, SIGINT
 * and SIGQUIT are ignored in it; hooprun stops ranks with SIGTERM. The
 * script exits with the program's status (128+S when it was killed by signal
 * S), which the client passes on; the redirection on wait keeps dash from
 * reporting such a death as rank output. */
static const char remote_wrapper[] =
    "IFS= read -r HOOP_TOKEN || exit 1; export HOOP_TOKEN; "
    "exec 3<&0 </dev/null; trap '' TERM HUP; "
    "if command -v setsid >/dev/null 2>&1; then "
    "{ trap - TERM HUP; exec setsid \"$@\"; } 3<&- & g=-$!; "
    "else { trap - TERM HUP; exec \"$@\"; } 3<&- & g=$!; fi; pid=$!; "
    "{ trap 'kill $s; exit' TERM; cat >/dev/null; kill -s TERM -- $g; "
    "sleep 3 & s=$!; wait $s; kill -s KILL -- $g; } <&3 >/dev/null 2>&1 & "
    "w=$!; exec 3<&-; trap 'kill -s TERM -- $g 2>/dev/null' TERM HUP; "
    "while :; do wait $pid 2>/dev/null; rc=$?; "
    "[ $rc -gt 128 ] && kill -0 $pid 2>/dev/null || break; done; "
    "kill $w 2>/dev/null; kill -s KILL -- $g 2>/dev/null; exit $rc";

struct sbuf {
    char *p;
    size_t len, cap;
    bool failed;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

/* One word for a POSIX shell, whatever it holds: inside single quotes only
 * the quote itself is special, and it is written as '\''. */
static void sb_word(struct sbuf *b, const char *s)
{
    if (b->len > 0)
        sb_add(b, " ", 1);
    sb_add(b, "'", 1);
    for (const char *q; (q = strchr(s, '\'')); s = q + 1) {
        sb_add(b, s, (size_t)(q - s));
        sb_add(b, "'\\''", 4);
    }
    sb_str(b, s);
    sb_add(b, "'", 1);
}

static void sb_assign(struct sbuf *b, const char *name, const char *value)
{
    struct sbuf w = {0};
    sb_str(&w, name);
    sb_add(&w, "=", 1);
    sb_str(&w, value);
    if (w.failed)
        b->failed = true;
    else
        sb_word(b, w.p);
    free(w.p);
}

/* The -x variables that have a value, as NAME and VALUE. */
bool xvar(int i, char *name, size_t len, const char **value)
{
    const char *x = J.opt.xvars[i], *eq = strchr(x, '=');
    size_t n = eq ? (size_t)(eq - x) : strlen(x);
    if (n >= len)
        return false;
    memcpy(name, x, n);
    name[n] = '\0';
    *value = eq ? eq + 1 : getenv(name);
    return *value != NULL;
}

/* What the remote user's shell runs:
 *   cd 'CWD' && exec env 'NAME=VALUE'... 'HOOP_RANK=R' 'HOOP_SIZE=N' 'HOOP_ROOT=H:P'
 *       sh -c 'WRAPPER' sh 'PROG' 'ARG'...
 * Every word is quoted, so that any argument reaches the program intact;
 * the HOOP_ variables come last, so that -x cannot change them. */
char *remote_command(int rank)
{
    struct sbuf b = {0};
    char num[16], name[256];
    const char *value;
    sb_word(&b, "cd");
    sb_word(&b, J.cwd);
    sb_str(&b, " && exec");
    sb_word(&b, "env");
    for (int i = 0; i < J.opt.nx; i++)
        if (xvar(i, name, sizeof name, &value))
            sb_assign(&b, name, value);
    snprintf(num, sizeof num, "%d", rank);
    sb_assign(&b, "HOOP_RANK", num);
    snprintf(num, sizeof num, "%d", J.opt.np);
    sb_assign(&b, "HOOP_SIZE", num);
    sb_assign(&b, "HOOP_ROOT", J.root);
    sb_word(&b, "sh");
    sb_word(&b, "-c");
    sb_word(&b, remote_wrapper);
    sb_word(&b, "sh");
    for (char **a = J.opt.argv; *a; a++)
        sb_word(&b, *a);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* The remote shell's words, then for ssh -T (a terminal would mangle the
 * output and keep EOF on the lifeline from reaching the remote side) and
 * BatchMode (a password prompt would hang the job unseen), then the host and
 * the command. The user's -o options come first, so they win where they
 * disagree: ssh keeps the first value it gets of each. */
char **remote_argv(int rank, char *cmd)
{
    char **av = calloc((size_t)J.nrsh + 6, sizeof *av);
    if (!av)
        return NULL;
    int n = 0;
    for (int i = 0; i < J.nrsh; i++)
        av[n++] = J.rsh[i];
    if (J.rsh_is_ssh) {
        av[n++] = "-T";
        av[n++] = "-o";
        av[n++] = "BatchMode=yes";
    }
    av[n++] = J.hosts[J.ranks[rank].host].name;
    av[n++] = cmd;
    av[n] = NULL;
    return av;
}

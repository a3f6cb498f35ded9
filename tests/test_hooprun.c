/* test_hooprun.c - the launcher, run as a program the way users run it.
 *
 * hooprun is started with fork/exec and its stdout and stderr captured
 * separately; every run has its own deadline on top of --timeout, so that a
 * launcher that hangs fails the test instead of stalling the suite.
 */
#include <criterion/criterion.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <limits.h>

#include "harness.h"
#include "proc.h"

/* Far above what any run here needs, far below Criterion's own timeout. */
#define RUN_LIMIT_S 40.0

static const char *hooprun_path(void)
{
    return harness_built("hooprun");
}

/* Run hooprun with args (NULL-terminated, without argv[0]). If wait_for is
 * given, sig is sent to hooprun once its stdout holds every one of those
 * strings. */
static void run_hooprun_sig(struct proc_capture *res, const char *const *wait_for, int sig,
                            const char *const *args)
{
    const char *argv[64];
    size_t n = 0;
    argv[n++] = hooprun_path();
    for (size_t i = 0; args[i]; i++) {
        cr_assert(n < 63, "too many arguments");
        argv[n++] = args[i];
    }
    argv[n] = NULL;

    const struct proc_capture_opts o = {.limit_s = RUN_LIMIT_S, .wait_for = wait_for, .sig = sig};
    cr_assert(proc_capture(res, &o, 126, argv), "cannot run hooprun: %s", strerror(errno));
    cr_assert(res->status != -1, "hooprun did not finish within %.0f s\nstdout:\n%s\nstderr:\n%s",
              RUN_LIMIT_S, res->out.p, res->err.p);
}

static void run_hooprun(struct proc_capture *res, const char *const *args)
{
    run_hooprun_sig(res, NULL, 0, args);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        if (*s == '\n')
            n++;
    return n;
}

static bool is_token(const char *t)
{
    if (strlen(t) != 32)
        return false;
    for (; *t; t++)
        if (!isdigit((unsigned char)*t) && !(*t >= 'a' && *t <= 'f'))
            return false;
    return true;
}

/* Gone, or a zombie waiting for a parent that may never reap it. */
static bool process_gone(pid_t pid, double within_s)
{
    double end = harness_now() + within_s;
    for (;;) {
        if (kill(pid, 0) < 0 && errno == ESRCH)
            return true;
        char path[64], stat[512];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f)
            return true;
        size_t n = fread(stat, 1, sizeof stat - 1, f);
        fclose(f);
        stat[n] = '\0';
        const char *paren = strrchr(stat, ')');
        if (paren && (paren[2] == 'Z' || paren[2] == 'X'))
            return true;
        if (harness_now() > end)
            return false;
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
    }
}

static const char *token_of(const char *line)
{
    const char *t = strstr(line, "token=");
    return t ? t + 6 : "";
}

Test(hooprun, environment_of_every_rank, .timeout = 60)
{
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "-np", "3", "sh", "-c",
                         "echo rank=$HOOP_RANK size=$HOOP_SIZE root=$HOOP_ROOT token=$HOOP_TOKEN"));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    cr_assert_eq(count_lines(r.out.p), 3, "expected 3 lines, got:\n%s", r.out.p);

    bool seen[3] = {false, false, false};
    char root0[64] = "", token0[64] = "";
    char *save = NULL;
    for (char *line = strtok_r(r.out.p, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int tag, rank, size;
        char root[64], token[64];
        int got = sscanf(line, "[%d] rank=%d size=%d root=%63s token=%63s", &tag, &rank, &size, root,
                         token);
        cr_assert_eq(got, 5, "unexpected line '%s'", line);
        cr_assert(tag >= 0 && tag < 3 && !seen[tag], "bad or repeated tag in '%s'", line);
        seen[tag] = true;
        cr_assert_eq(rank, tag, "line tagged %d says rank %d", tag, rank);
        cr_assert_eq(size, 3, "size %d in '%s'", size, line);
        cr_assert(strncmp(root, "127.0.0.1:", 10) == 0 && atoi(root + 10) > 0,
                  "bad root in '%s'", line);
        cr_assert(is_token(token), "token '%s' is not 32 lowercase hex digits", token);
        if (!root0[0]) {
            strcpy(root0, root);
            strcpy(token0, token);
        }
        cr_assert_str_eq(root, root0, "ranks disagree on the root");
        cr_assert_str_eq(token, token0, "ranks disagree on the token");
    }
    proc_capture_free(&r);
}

Test(hooprun, every_job_gets_its_own_token, .timeout = 60)
{
    struct proc_capture a, b;
    const char *const *args = ARGS("--timeout", "30", "-np", "1", "sh", "-c", "echo token=$HOOP_TOKEN");
    run_hooprun(&a, args);
    run_hooprun(&b, args);
    cr_assert(a.status == 0 && b.status == 0, "exit statuses %d and %d", a.status, b.status);
    char ta[64] = "", tb[64] = "";
    sscanf(token_of(a.out.p), "%63s", ta);
    sscanf(token_of(b.out.p), "%63s", tb);
    cr_assert(is_token(ta) && is_token(tb), "bad tokens in '%s' and '%s'", a.out.p, b.out.p);
    cr_assert_str_neq(ta, tb, "two jobs got the same token %s", ta);
    proc_capture_free(&a);
    proc_capture_free(&b);
}

Test(hooprun, no_tag_leaves_lines_alone, .timeout = 60)
{
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "--no-tag", "-np", "2", "sh", "-c", "echo hello $HOOP_RANK"));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    bool a = strcmp(r.out.p, "hello 0\nhello 1\n") == 0;
    bool b = strcmp(r.out.p, "hello 1\nhello 0\n") == 0;
    cr_assert(a || b, "unexpected output:\n%s", r.out.p);
    proc_capture_free(&r);
}

Test(hooprun, failing_rank_stops_the_others, .timeout = 60)
{
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "-np", "3", "sh", "-c",
                         "if [ \"$HOOP_RANK\" = 1 ]; then exit 3; fi; sleep 100"));
    cr_assert_eq(r.status, 3, "exit status %d, expected the failed rank's 3\nstderr:\n%s", r.status,
                 r.err.p);
    cr_assert_lt(r.elapsed_s, 10.0, "took %.1f s to stop the job", r.elapsed_s);
    cr_assert(strstr(r.err.p, "rank 1 exited with status 3"), "stderr does not name rank 1:\n%s",
              r.err.p);
    proc_capture_free(&r);
}

/* The pid in dir/name, or 0; the file goes away either way. */
static int take_pid(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int pid = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%d", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    unlink(path);
    snprintf(path, sizeof path, "%s/%s.tmp", dir, name);
    unlink(path);
    return pid;
}

/* Both a rank that is stopped and the rank that failed leave a background
 * process in their group; neither may outlive the job. */
Test(hooprun, stopping_a_rank_stops_its_descendants, .timeout = 60)
{
    const char *tmpdir = getenv("TMPDIR");
    char dir[256];
    snprintf(dir, sizeof dir, "%s/hooprun-test-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    cr_assert(mkdtemp(dir) != NULL, "mkdtemp %s: %s", dir, strerror(errno));
    /* Rank 1 fails only once rank 0's background sleep is known, so that
     * the sleep is certainly running when the job is stopped. */
    const char *script = "d=$1; if [ \"$HOOP_RANK\" = 0 ]; then "
                         "sleep 100 & echo $! > $d/p0.tmp; mv $d/p0.tmp $d/p0; wait; "
                         "else while [ ! -s $d/p0 ]; do sleep 0.05; done; "
                         "sleep 100 & echo $! > $d/p1.tmp; mv $d/p1.tmp $d/p1; exit 4; fi";
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "-np", "2", "sh", "-c", script, "sh", dir));
    int pid[2] = {take_pid(dir, "p0"), take_pid(dir, "p1")};
    rmdir(dir);
    bool gone[2];
    for (int i = 0; i < 2; i++) {
        gone[i] = pid[i] <= 0 || process_gone(pid[i], 3.0);
        if (!gone[i])
            kill(pid[i], SIGKILL);
    }
    cr_assert(pid[0] > 0 && pid[1] > 0, "a rank never wrote its sleep's pid\nstderr:\n%s", r.err.p);
    cr_assert_eq(r.status, 4, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    cr_assert(gone[0], "the background process %d of the stopped rank 0 survived the job", pid[0]);
    cr_assert(gone[1], "the background process %d of the failed rank 1 survived the job", pid[1]);
    cr_assert_lt(r.elapsed_s, 10.0, "took %.1f s", r.elapsed_s);
    proc_capture_free(&r);
}

Test(hooprun, rank_killed_by_signal, .timeout = 60)
{
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "-np", "2", "sh", "-c",
                         "if [ \"$HOOP_RANK\" = 1 ]; then kill -9 $$; fi; sleep 100"));
    cr_assert_eq(r.status, 128 + SIGKILL, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    cr_assert_lt(r.elapsed_s, 10.0, "took %.1f s to stop the job", r.elapsed_s);
    cr_assert(strstr(r.err.p, "rank 1 was killed by signal SIGKILL (9)"),
              "stderr does not name the rank and the signal:\n%s", r.err.p);
    proc_capture_free(&r);
}

Test(hooprun, stderr_goes_to_stderr, .timeout = 60)
{
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "-np", "2", "sh", "-c",
                         "echo out$HOOP_RANK; echo err$HOOP_RANK >&2"));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    cr_assert(strstr(r.out.p, "[0] out0\n") && strstr(r.out.p, "[1] out1\n"), "stdout:\n%s", r.out.p);
    cr_assert(strstr(r.err.p, "[0] err0\n") && strstr(r.err.p, "[1] err1\n"), "stderr:\n%s", r.err.p);
    cr_assert(!strstr(r.out.p, "err"), "stderr leaked into stdout:\n%s", r.out.p);
    cr_assert(!strstr(r.err.p, "out"), "stdout leaked into stderr:\n%s", r.err.p);
    proc_capture_free(&r);
}

Test(hooprun, missing_program, .timeout = 60)
{
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "-np", "2", "/nonexistent/hoop-no-such-program"));
    cr_assert_neq(r.status, 0, "a missing program counted as success");
    cr_assert(strstr(r.err.p, "cannot run '/nonexistent/hoop-no-such-program'"),
              "no 'cannot run' message on stderr:\n%s", r.err.p);
    proc_capture_free(&r);
}

Test(hooprun, unfinished_last_line_is_forwarded, .timeout = 60)
{
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "-np", "1", "printf", "abc"));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    cr_assert_str_eq(r.out.p, "[0] abc\n");
    proc_capture_free(&r);

    run_hooprun(&r, ARGS("--timeout", "30", "--no-tag", "-np", "1", "printf", "abc"));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    cr_assert_str_eq(r.out.p, "abc");
    proc_capture_free(&r);
}

Test(hooprun, long_line_comes_in_tagged_pieces, .timeout = 60)
{
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "-np", "1", "sh", "-c",
                         "head -c 150000 /dev/zero | tr '\\000' x; echo; echo end"));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    size_t xs = 0, lines = 0;
    char *save = NULL;
    for (char *line = strtok_r(r.out.p, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cr_assert(strncmp(line, "[0] ", 4) == 0, "untagged piece '%.20s...'", line);
        size_t len = strlen(line + 4);
        cr_assert_leq(len, 64 * 1024, "a piece of %zu bytes", len);
        if (strcmp(line + 4, "end") != 0)
            xs += strspn(line + 4, "x");
        lines++;
    }
    cr_assert_eq(xs, 150000, "%zu of 150000 bytes came through", xs);
    cr_assert_eq(lines, 4, "expected 3 pieces and 'end', got %zu lines", lines);
    proc_capture_free(&r);
}

/* Ranks that write a lot and exit at once: everything still in the pipes
 * must come out, in order for each rank. */
Test(hooprun, no_output_is_lost, .timeout = 60)
{
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "-np", "4", "sh", "-c", "seq 1 20000; seq 1 3000 >&2"));
    cr_assert_eq(r.status, 0, "exit status %d", r.status);
    struct proc_capture *rr = &r;
    struct proc_text *bufs[2] = {&rr->out, &rr->err};
    int expect[2] = {20000, 3000};
    for (int b = 0; b < 2; b++) {
        int last[4] = {0, 0, 0, 0};
        char *save = NULL;
        for (char *line = strtok_r(bufs[b]->p, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save)) {
            int rank, v;
            cr_assert(sscanf(line, "[%d] %d", &rank, &v) == 2 && rank >= 0 && rank < 4,
                      "unexpected line '%s'", line);
            cr_assert_eq(v, last[rank] + 1, "rank %d: %d after %d", rank, v, last[rank]);
            last[rank] = v;
        }
        for (int k = 0; k < 4; k++)
            cr_assert_eq(last[k], expect[b], "rank %d: %s ended at %d", k, b ? "stderr" : "stdout",
                         last[k]);
    }
    proc_capture_free(&r);
}

Test(hooprun, timeout_stops_the_job, .timeout = 60)
{
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "1", "-np", "2", "sleep", "100"));
    cr_assert_neq(r.status, 0, "a timed out job counted as success");
    cr_assert_lt(r.elapsed_s, 10.0, "took %.1f s", r.elapsed_s);
    cr_assert(strstr(r.err.p, "timeout"), "stderr does not say why:\n%s", r.err.p);
    proc_capture_free(&r);
}

Test(hooprun, sigterm_stops_the_job, .timeout = 60)
{
    struct proc_capture r;
    run_hooprun_sig(&r, ARGS("[0] up", "[1] up"), SIGTERM,
                    ARGS("--timeout", "30", "-np", "2", "sh", "-c", "echo up; sleep 100"));
    cr_assert_eq(r.status, 128 + SIGTERM, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    cr_assert_lt(r.elapsed_s, 10.0, "took %.1f s", r.elapsed_s);
    proc_capture_free(&r);
}

Test(hooprun, port_option_sets_the_root, .timeout = 60)
{
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "--port", "45678", "-np", "2", "sh", "-c",
                         "echo $HOOP_ROOT"));
    cr_assert_eq(r.status, 0, "exit status %d", r.status);
    cr_assert(strstr(r.out.p, "[0] 127.0.0.1:45678\n") && strstr(r.out.p, "[1] 127.0.0.1:45678\n"),
              "stdout:\n%s", r.out.p);
    proc_capture_free(&r);
}

/* The root's port comes from below the ephemeral range, where no outgoing
 * connection can take it between hooprun's probe and rank 0's listen. */
Test(hooprun, root_port_lies_below_the_ephemeral_range, .timeout = 60)
{
    int lo = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (!f || fscanf(f, "%d", &lo) != 1 || lo - 20000 < 1000) {
        if (f)
            fclose(f);
        cr_skip_test("the ephemeral range here starts at %d, which leaves no room below it", lo);
    }
    fclose(f);
    int ports[8];
    for (int i = 0; i < 8; i++) {
        struct proc_capture r;
        run_hooprun(&r, ARGS("--timeout", "30", "-np", "1", "sh", "-c", "echo $HOOP_ROOT"));
        cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
        cr_assert_eq(sscanf(r.out.p, "[0] 127.0.0.1:%d", &ports[i]), 1, "stdout:\n%s", r.out.p);
        cr_assert(ports[i] >= 20000 && ports[i] < lo, "root port %d is not in [20000, %d)", ports[i], lo);
        proc_capture_free(&r);
    }
    bool differ = false;
    for (int i = 1; i < 8; i++)
        differ |= ports[i] != ports[0];
    cr_assert(differ, "eight jobs all got port %d: the draw is not random", ports[0]);
}

Test(hooprun, bad_usage_exits_2, .timeout = 60)
{
    const char *const *cases[] = {
        ARGS("--bogus", "-np", "2", "true"),
        ARGS("-np", "0", "true"),
        ARGS("-np", "4097", "true"),
        ARGS("-np", "two", "true"),
        ARGS("-np", "2"),
        ARGS("true"),
        ARGS("--bind-to", "socket", "-np", "2", "true"),
        ARGS("--bind-to", "-np", "2", "true"),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct proc_capture r;
        run_hooprun(&r, cases[i]);
        cr_assert_eq(r.status, 2, "case %zu: exit status %d\nstderr:\n%s", i, r.status, r.err.p);
        cr_assert(strstr(r.err.p, "usage"), "case %zu: no usage on stderr:\n%s", i, r.err.p);
        cr_assert_eq(r.out.len, 0, "case %zu: wrote to stdout:\n%s", i, r.out.p);
        proc_capture_free(&r);
    }
}

/* The CPU list of each rank's Cpus_allowed_list, by rank: ranks print
 * "RANK LIST" lines. */
static void allowed_lists(const char *out, int np, char lists[][64])
{
    for (int k = 0; k < np; k++)
        lists[k][0] = '\0';
    for (const char *p = out; *p;) {
        int rank;
        char list[64];
        if (sscanf(p, "%d Cpus_allowed_list: %63s", &rank, list) == 2 && rank >= 0 && rank < np)
            snprintf(lists[rank], 64, "%s", list);
        const char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : p + strlen(p);
    }
}

#define PRINT_ALLOWED "echo $HOOP_RANK $(grep Cpus_allowed_list /proc/self/status)"

/* --bind-to core: local rank k on the k-th CPU (round robin) of those
 * hooprun may use; one rank more than there are CPUs, so that two share. */
Test(hooprun, bind_to_core_puts_rank_k_on_the_kth_cpu, .timeout = 60)
{
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0, "sched_getaffinity: %s",
                 strerror(errno));
    int cpus[CPU_SETSIZE], ncpus = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            cpus[ncpus++] = c;
    int np = ncpus + 1 > 16 ? 16 : ncpus + 1;
    char npstr[16];
    snprintf(npstr, sizeof npstr, "%d", np);
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "--no-tag", "--bind-to", "core", "-np", npstr, "sh",
                         "-c", PRINT_ALLOWED));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    char lists[16][64];
    allowed_lists(r.out.p, np, lists);
    for (int k = 0; k < np; k++) {
        char want[16];
        snprintf(want, sizeof want, "%d", cpus[k % ncpus]);
        cr_assert_str_eq(lists[k], want, "rank %d may run on '%s', not only on CPU %s\nstdout:\n%s",
                         k, lists[k], want, r.out.p);
    }
    if (np > ncpus)
        cr_assert(strstr(r.err.p, "some share one"), "no word that ranks share CPUs:\n%s",
                  r.err.p);
    proc_capture_free(&r);
}

/* Without --bind-to (and with --bind-to none) ranks keep hooprun's CPUs. */
Test(hooprun, ranks_are_not_bound_by_default, .timeout = 60)
{
    FILE *f = fopen("/proc/self/status", "r");
    cr_assert(f, "cannot read /proc/self/status: %s", strerror(errno));
    char line[256], mine[64] = "";
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Cpus_allowed_list: %63s", mine) == 1)
            break;
    fclose(f);
    cr_assert(mine[0], "no Cpus_allowed_list in /proc/self/status");
    const char *const *cases[] = {
        ARGS("--timeout", "30", "--no-tag", "-np", "2", "sh", "-c", PRINT_ALLOWED),
        ARGS("--timeout", "30", "--no-tag", "--bind-to", "none", "-np", "2", "sh", "-c",
             PRINT_ALLOWED),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct proc_capture r;
        run_hooprun(&r, cases[i]);
        cr_assert_eq(r.status, 0, "case %zu: exit status %d\nstderr:\n%s", i, r.status, r.err.p);
        char lists[2][64];
        allowed_lists(r.out.p, 2, lists);
        for (int k = 0; k < 2; k++)
            cr_assert_str_eq(lists[k], mine, "case %zu: rank %d may run on '%s', hooprun on '%s'",
                             i, k, lists[k], mine);
        proc_capture_free(&r);
    }
}

/* ---- several hosts --------------------------------------------------------
 *
 * Hosts that are this machine run their ranks directly. Other hosts go
 * through a stand-in remote shell that runs the command here, as the remote
 * user's shell would, and says on stderr which host and options it got; so
 * placement, quoting and stopping are checked without a network. The real
 * thing, over ssh between network namespaces, is in test_multihost.c.
 */

static char stub_dir[PATH_MAX];

static void stub_cleanup(void)
{
    if (!stub_dir[0])
        return;
    static const char *const names[] = {"ssh", "rsh-stub", "commands", "hosts"};
    char path[PATH_MAX + 16];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", stub_dir, names[i]);
        unlink(path);
    }
    rmdir(stub_dir);
    stub_dir[0] = '\0';
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    cr_assert(fd >= 0, "cannot create %s: %s", path, strerror(errno));
    size_t len = strlen(text);
    cr_assert(write(fd, text, len) == (ssize_t)len, "cannot write %s: %s", path, strerror(errno));
    close(fd);
}

/* A directory with the stand-in under two names: "ssh", which hooprun
 * recognises, and "rsh-stub", which it does not. Every command it is given
 * is appended to DIR/commands. */
static void make_stubs(void)
{
    static const char stub[] =
        "#!/bin/sh\n"
        "opts=\n"
        "while [ $# -gt 2 ]; do opts=\"$opts $1\"; shift; done\n"
        "echo \"host=$1 opts=$opts\" >&2\n"
        "printf '%s\\n' \"$2\" >> \"${0%/*}/commands\"\n"
        "exec /bin/sh -c \"$2\"\n";
    const char *tmpdir = getenv("TMPDIR");
    snprintf(stub_dir, sizeof stub_dir, "%s/hooprun-hosts-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    cr_assert(mkdtemp(stub_dir) != NULL, "mkdtemp %s: %s", stub_dir, strerror(errno));
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/ssh", stub_dir);
    write_file(path, stub, 0755);
    snprintf(path, sizeof path, "%s/rsh-stub", stub_dir);
    write_file(path, stub, 0755);
}

static const char *stub(const char *name, const char *opts)
{
    static char cmd[2][PATH_MAX + 128];
    static int next;
    char *c = cmd[next++ % 2];
    snprintf(c, sizeof cmd[0], "%s/%s%s%s", stub_dir, name, opts ? " " : "", opts ? opts : "");
    return c;
}

/* Each of the n ranks wrote exactly one stdout line "[r] rank=r ...". */
static void expect_one_line_per_rank(const struct proc_capture *r, int n)
{
    cr_assert_eq((int)count_lines(r->out.p), n, "expected %d lines, got:\n%s", n, r->out.p);
    for (int k = 0; k < n; k++) {
        char want[32];
        snprintf(want, sizeof want, "[%d] rank=%d", k, k);
        cr_assert(strstr(r->out.p, want), "no line '%s' in:\n%s", want, r->out.p);
    }
}

/* The root every rank printed as "root=HOST:PORT": the same for all, and
 * host-prefixed. Returns the port. */
static int common_root_port(const struct proc_capture *r, const char *host)
{
    char prefix[300];
    snprintf(prefix, sizeof prefix, "root=%s:", host);
    int port = -1;
    for (const char *p = r->out.p; (p = strstr(p, "root=")); p++) {
        cr_assert(strncmp(p, prefix, strlen(prefix)) == 0, "expected %s..., got '%.40s'", prefix, p);
        int v = atoi(p + strlen(prefix));
        cr_assert(port < 0 || v == port, "ranks disagree on the root port: %d and %d", port, v);
        port = v;
    }
    cr_assert(port > 0 && port < 65536, "no root port in:\n%s", r->out.p);
    return port;
}

Test(hooprun, hosts_of_this_machine_run_directly, .timeout = 60)
{
    struct proc_capture r;
    /* A remote shell that cannot run proves that none was needed. */
    run_hooprun(&r, ARGS("--timeout", "30", "-np", "3", "-H", "localhost:2,127.0.0.1:1", "--rsh",
                         "/nonexistent/hoop-no-rsh", "sh", "-c",
                         "echo rank=$HOOP_RANK size=$HOOP_SIZE root=$HOOP_ROOT"));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    expect_one_line_per_rank(&r, 3);
    cr_assert_eq(strstr(r.out.p, "size=3") != NULL, true, "stdout:\n%s", r.out.p);
    common_root_port(&r, "127.0.0.1");
    proc_capture_free(&r);

    char self[256], hosts[300];
    cr_assert(gethostname(self, sizeof self) == 0, "gethostname: %s", strerror(errno));
    self[sizeof self - 1] = '\0';
    snprintf(hosts, sizeof hosts, "%s:2", self);
    run_hooprun(&r, ARGS("--timeout", "30", "-H", hosts, "--rsh", "/nonexistent/hoop-no-rsh", "sh",
                         "-c", "echo rank=$HOOP_RANK root=$HOOP_ROOT"));
    cr_assert_eq(r.status, 0, "-H %s: exit status %d\nstderr:\n%s", hosts, r.status, r.err.p);
    expect_one_line_per_rank(&r, 2); /* -np defaults to the slots */
    proc_capture_free(&r);
}

Test(hooprun, ranks_fill_the_hosts_in_order, .timeout = 60, .fini = stub_cleanup)
{
    make_stubs();
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "-np", "4", "-H", "localhost:1,node-a:2", "-H",
                         "alice@node-b:2", "--root-addr", "198.18.0.9", "--rsh",
                         stub("rsh-stub", "-p 2222"), "sh", "-c",
                         "echo rank=$HOOP_RANK root=$HOOP_ROOT"));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    expect_one_line_per_rank(&r, 4);
    common_root_port(&r, "198.18.0.9");
    /* Rank 0 ran here; node-b's second slot was not needed. */
    cr_assert(!strstr(r.err.p, "[0] host="), "rank 0 went through the remote shell:\n%s", r.err.p);
    cr_assert(strstr(r.err.p, "[1] host=node-a opts= -p 2222\n") &&
                  strstr(r.err.p, "[2] host=node-a opts= -p 2222\n") &&
                  strstr(r.err.p, "[3] host=alice@node-b opts= -p 2222\n"),
              "wrong placement or options:\n%s", r.err.p);
    cr_assert_eq((int)count_lines(r.err.p), 3, "stderr:\n%s", r.err.p);
    proc_capture_free(&r);
}

Test(hooprun, remote_root_is_the_first_host, .timeout = 60, .fini = stub_cleanup)
{
    make_stubs();
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "-np", "2", "-H", "node-a:1,localhost:1", "--rsh",
                         stub("rsh-stub", NULL), "sh", "-c", "echo rank=$HOOP_RANK root=$HOOP_ROOT"));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    expect_one_line_per_rank(&r, 2);
    /* No port can be probed on another host: one is drawn from this range. */
    int port = common_root_port(&r, "node-a");
    cr_assert(port >= 20000 && port <= 32767, "port %d is outside 20000..32767", port);
    proc_capture_free(&r);

    run_hooprun(&r, ARGS("--timeout", "30", "--port", "45679", "-H", "[fe80::99]:2", "--rsh",
                         stub("rsh-stub", NULL), "sh", "-c", "echo rank=$HOOP_RANK root=$HOOP_ROOT"));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    expect_one_line_per_rank(&r, 2);
    cr_assert_eq(common_root_port(&r, "[fe80::99]"), 45679);
    cr_assert(strstr(r.err.p, "[0] host=fe80::99 opts=\n"), "the remote shell got:\n%s", r.err.p);
    proc_capture_free(&r);
}

Test(hooprun, ssh_gets_batch_mode_and_no_terminal, .timeout = 60, .fini = stub_cleanup)
{
    make_stubs();
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "-H", "node-a", "--rsh", stub("ssh", "-i key"), "true"));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    cr_assert_str_eq(r.err.p, "[0] host=node-a opts= -i key -T -o BatchMode=yes\n");
    proc_capture_free(&r);

    /* HOOP_RSH when there is no --rsh; --rsh when there is. */
    char env[PATH_MAX + 64];
    snprintf(env, sizeof env, "%s", stub("ssh", "-p  2222"));
    cr_assert(setenv("HOOP_RSH", env, 1) == 0);
    run_hooprun(&r, ARGS("--timeout", "30", "-H", "node-a", "true"));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    cr_assert_str_eq(r.err.p, "[0] host=node-a opts= -p 2222 -T -o BatchMode=yes\n");
    proc_capture_free(&r);
    run_hooprun(&r, ARGS("--timeout", "30", "-H", "node-a", "--rsh", stub("rsh-stub", NULL), "true"));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    cr_assert_str_eq(r.err.p, "[0] host=node-a opts=\n");
    proc_capture_free(&r);
}

/* Whatever the arguments and the -x values hold reaches the remote program
 * unchanged, in hooprun's directory; the token reaches it too, but not
 * through the command line, which any user can read. */
Test(hooprun, remote_ranks_get_arguments_and_variables_intact, .timeout = 60, .fini = stub_cleanup)
{
    make_stubs();
    static const char tricky[] = "it's a \"test\" $HOME `x` \\ ;|&";
    cr_assert(setenv("HOOP_TEST_FORWARDED", tricky, 1) == 0);
    cr_assert(unsetenv("HOOP_TEST_UNSET") == 0);
    char cwd[PATH_MAX];
    cr_assert(getcwd(cwd, sizeof cwd) != NULL);
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "-np", "2", "-H", "node-a:2", "--rsh",
                         stub("rsh-stub", NULL), "-x", "HOOP_TEST_FORWARDED", "-x", "HOOP_TEST_UNSET",
                         "-x", "HOOP_TEST_SET=a b'c", "--no-tag", "sh", "-c",
                         "[ \"$HOOP_RANK\" = 1 ] || exit 0; "
                         "printf '<%s>\\n' \"$HOOP_TEST_FORWARDED\" \"${HOOP_TEST_UNSET-unset}\" "
                         "\"$HOOP_TEST_SET\" \"$PWD\" \"$HOOP_TOKEN\" \"$@\"",
                         "sh", "a  b", "it's", "$HOME", "\\", "", "-x"));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    char want[8192];
    char token[33] = "";
    const char *t = strstr(r.out.p, "\n<");
    for (int i = 0; t && i < 3; i++) /* the fifth line */
        t = strstr(t + 1, "\n<");
    if (t)
        snprintf(token, sizeof token, "%s", t + 2);
    cr_assert(is_token(token), "no token in:\n%s", r.out.p);
    snprintf(want, sizeof want, "<%s>\n<unset>\n<a b'c>\n<%s>\n<%s>\n<a  b>\n<it's>\n<$HOME>\n<\\>\n<>\n<-x>\n",
             tricky, cwd, token);
    cr_assert_str_eq(r.out.p, want);

    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/commands", stub_dir);
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "the remote shell was never run");
    char cmds[16384];
    size_t n = fread(cmds, 1, sizeof cmds - 1, f);
    fclose(f);
    cmds[n] = '\0';
    cr_assert(strstr(cmds, "HOOP_RANK=1") != NULL, "commands:\n%s", cmds);
    cr_assert(strstr(cmds, token) == NULL, "the token is on the remote command line:\n%s", cmds);
    proc_capture_free(&r);
}

/* /proc entries whose command line holds tag; their pids and command lines
 * go to report. With kill_them, they also get SIGKILL: the tag is unique to
 * the test, so they are its own. */
static int processes_with(const char *tag, char *report, size_t len, bool kill_them)
{
    int found = proc_tagged(tag, report, len, "", kill_them);
    cr_assert(found >= 0, "opendir /proc: %s", strerror(errno));
    return found;
}

static bool none_left(const char *tag, double within_s, char *report, size_t len)
{
    double end = harness_now() + within_s;
    while (processes_with(tag, report, len, false) > 0) {
        if (harness_now() > end) {
            char ignored[1];
            processes_with(tag, ignored, sizeof ignored, true);
            return false;
        }
        nanosleep(&(struct timespec){.tv_nsec = 50 * 1000 * 1000}, NULL);
    }
    return true;
}

Test(hooprun, failing_remote_rank_stops_every_rank, .timeout = 60, .fini = stub_cleanup)
{
    make_stubs();
    char tag[64], report[4096];
    snprintf(tag, sizeof tag, "hoop-remote-fail-%d", (int)getpid());
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "-np", "3", "-H", "localhost:1,node-a:2", "--root-addr",
                         "198.18.0.9", "--rsh", stub("rsh-stub", NULL), "sh", "-c",
                         "if [ \"$HOOP_RANK\" = 2 ]; then sleep 0.5; exit 3; fi; sleep 100; : $1",
                         "sh", tag));
    bool clean = none_left(tag, 5.0, report, sizeof report);
    cr_assert_eq(r.status, 3, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    cr_assert(strstr(r.err.p, "rank 2 on node-a exited with status 3"), "stderr:\n%s", r.err.p);
    cr_assert_lt(r.elapsed_s, 10.0, "took %.1f s to stop the job", r.elapsed_s);
    cr_assert(clean, "left behind:\n%s", report);
    proc_capture_free(&r);
}

/* Even a hooprun killed outright cannot close the lifeline in order; its
 * end must still end the remote program. */
Test(hooprun, killed_hooprun_ends_remote_ranks, .timeout = 60, .fini = stub_cleanup)
{
    make_stubs();
    char tag[64], report[4096];
    snprintf(tag, sizeof tag, "hoop-remote-orphan-%d", (int)getpid());
    struct proc_capture r;
    run_hooprun_sig(&r, ARGS("[0] up", "[1] up"), SIGKILL,
                    ARGS("--timeout", "30", "-np", "2", "-H", "node-a:2", "--rsh",
                         stub("rsh-stub", NULL), "sh", "-c", "echo up; sleep 100; : $1", "sh", tag));
    bool clean = none_left(tag, 8.0, report, sizeof report);
    cr_assert_eq(r.status, 128 + SIGKILL, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    cr_assert(clean, "left behind by a killed hooprun:\n%s", report);
    proc_capture_free(&r);
}

Test(hooprun, hostfile_lines_and_comments, .timeout = 60, .fini = stub_cleanup)
{
    make_stubs();
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/hosts", stub_dir);
    write_file(path,
               "# two here, three elsewhere\n"
               "localhost slots=2   # this machine\n"
               "\n"
               "   node-a:2\n"
               "node-b\t# one slot\n",
               0644);
    struct proc_capture r;
    run_hooprun(&r, ARGS("--timeout", "30", "--hostfile", path, "--root-addr", "198.18.0.9", "--rsh",
                         stub("rsh-stub", NULL), "sh", "-c", "echo rank=$HOOP_RANK size=$HOOP_SIZE"));
    cr_assert_eq(r.status, 0, "exit status %d\nstderr:\n%s", r.status, r.err.p);
    expect_one_line_per_rank(&r, 5);
    cr_assert(strstr(r.out.p, "[4] rank=4 size=5\n"), "stdout:\n%s", r.out.p);
    cr_assert(!strstr(r.err.p, "[0] host=") && !strstr(r.err.p, "[1] host="), "stderr:\n%s", r.err.p);
    cr_assert(strstr(r.err.p, "[2] host=node-a") && strstr(r.err.p, "[3] host=node-a") &&
                  strstr(r.err.p, "[4] host=node-b"),
              "wrong placement:\n%s", r.err.p);
    proc_capture_free(&r);

    run_hooprun(&r, ARGS("--timeout", "30", "-np", "6", "--hostfile", path, "--root-addr", "x",
                         "--rsh", "/nonexistent/hoop-no-rsh", "true"));
    cr_assert_eq(r.status, 2, "6 ranks on 5 slots: exit status %d\nstderr:\n%s", r.status, r.err.p);
    cr_assert(strstr(r.err.p, "only 5"), "stderr:\n%s", r.err.p);
    proc_capture_free(&r);
}

Test(hooprun, bad_hosts_exit_2, .timeout = 60, .fini = stub_cleanup)
{
    make_stubs();
    static const struct {
        const char *hosts; /* -H, or the hostfile's text when file is set */
        bool file;
        const char *says;
    } cases[] = {
        {"", false, "empty host name"},
        {"node-a,", false, "empty host name"},
        {"node-a,,node-b", false, "empty host name"},
        {":2", false, "empty host name"},
        {"node-a:", false, "slots"},
        {"node-a:0", false, "slots"},
        {"node-a:two", false, "slots"},
        {"node-a:4097", false, "slots"},
        {"fe80::1:2", false, "brackets"},
        {"[fe80::1:2", false, "']'"},
        {"[fe80::1]2", false, "after ']'"},
        {"-oProxyCommand=x", false, "'-'"},
        {"@node-a", false, "user"},
        {"localhost:1,node-a:1", false, "--root-addr"},
        {"node-a:1,node-b:1", false, "only 2"}, /* with -np 3 */
        {"node-a slots=0\n", true, ":1: 'slots=0'"},
        {"# fine\nnode-a slots=x\n", true, ":2: 'slots=x'"},
        {"node-a:2 slots=2\n", true, "given twice"},
        {"node-a max_slots=2\n", true, "not slots=N"},
        {"node-a,node-b\n", true, "character"},
        {"node'a\n", true, "character"},
        {"# nothing\n\n", true, "names no host"},
    };
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/hosts", stub_dir);
    /* Should a case be taken for a good host after all, the remote shell
     * fails to start rather than reach out to a network; HOOP_RSH covers
     * the cases without --rsh. */
    const char *no_rsh = "/nonexistent/hoop-no-rsh";
    cr_assert(setenv("HOOP_RSH", no_rsh, 1) == 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct proc_capture r;
        bool with_np = strcmp(cases[i].says, "only 2") == 0;
        if (cases[i].file) {
            write_file(path, cases[i].hosts, 0644);
            run_hooprun(&r, ARGS("--rsh", no_rsh, "--hostfile", path, "true"));
        } else if (with_np) {
            run_hooprun(&r, ARGS("--rsh", no_rsh, "-np", "3", "-H", cases[i].hosts, "true"));
        } else {
            run_hooprun(&r, ARGS("--rsh", no_rsh, "-H", cases[i].hosts, "true"));
        }
        cr_assert_eq(r.status, 2, "case %zu (%s): exit status %d\nstderr:\n%s", i, cases[i].hosts,
                     r.status, r.err.p);
        cr_assert(strstr(r.err.p, cases[i].says), "case %zu (%s): stderr does not say '%s':\n%s", i,
                  cases[i].hosts, cases[i].says, r.err.p);
        cr_assert_eq(r.out.len, 0, "case %zu: wrote to stdout:\n%s", i, r.out.p);
        proc_capture_free(&r);
    }

    const char *const *other[] = {
        ARGS("--hostfile", "/nonexistent/hoop-hosts", "--rsh", no_rsh, "true"),
        ARGS("-H", "node-a", "--hostfile", path, "--rsh", no_rsh, "true"),
        ARGS("-H", "node-a", "--rsh", "", "true"),
        ARGS("-H", "node-a", "--rsh", "   ", "true"),
        ARGS("-np", "1", "-x", "1BAD", "true"),
        ARGS("-np", "1", "-x", "=v", "true"),
        ARGS("-np", "1", "--root-addr", "", "true"),
        ARGS("-H", "node-a", "--rsh", no_rsh),
    };
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        struct proc_capture r;
        run_hooprun(&r, other[i]);
        cr_assert_eq(r.status, 2, "case %s: exit status %d\nstderr:\n%s", other[i][1], r.status,
                     r.err.p);
        cr_assert(strstr(r.err.p, "hooprun: "), "case %s: no message:\n%s", other[i][1], r.err.p);
        proc_capture_free(&r);
    }
}

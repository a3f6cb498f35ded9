/* test_multihost.c - hooprun across hosts, for real.
 *
 * Two network namespaces joined by a veth pair stand for two hosts, each
 * with an sshd of its own; hooprun starts in the first and reaches the
 * second over ssh, with a key made for the test. Each test builds its pair
 * from scratch, named after the test process so that tests running side by
 * side never meet, and .fini tears it down whether the test passed or not.
 * The only addresses used are 198.18.0.1 and 198.18.0.2 (the benchmarking
 * range), inside those namespaces.
 */
#include <criterion/criterion.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "proc.h"

/* Far above what a run needs even on a loaded machine, where an ssh login
 * alone can take seconds; far below the tests' own timeouts. */
#define RUN_LIMIT_S 100.0
#define CMD_LIMIT_S 20.0
#define SSHD "/usr/sbin/sshd"
#define NS_PREFIX "hoopmh-"

static const char *const addr[2] = {"198.18.0.1", "198.18.0.2"};

static struct {
    char dir[PATH_MAX]; /* keys, configs, logs; empty when not made */
    char ns[2][64];
    bool ns_made[2];
    pid_t sshd[2];
    pid_t squatter; /* holds a port on B */
    char ip[PATH_MAX];
    char rsh[3 * PATH_MAX];
    char hooprun[PATH_MAX], ring_bench[PATH_MAX];
} M;

static void nap(int ms)
{
    nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L}, NULL);
}

/* Run argv (argv[0] a path) in network namespace ns (or here, when NULL) and
 * directory cwd (or here), capturing stdout and stderr; killed after
 * limit_s. */
static void run_in(struct proc_capture *res, const char *ns, const char *cwd, double limit_s,
                   const char *mark, const char *const *argv)
{
    const struct proc_capture_opts o = {.limit_s = limit_s, .netns = ns, .cwd = cwd, .mark = mark};
    cr_assert(proc_capture(res, &o, 127, argv), "cannot run %s: %s", argv[0], strerror(errno));
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* A helper command that must work; its output is in the failure message. */
static void must(const char *const *argv)
{
    struct proc_capture r;
    run_in(&r, NULL, NULL, CMD_LIMIT_S, NULL, argv);
    cr_assert_eq(r.status, 0, "'%s %s %s ...' failed with status %d:\n%s%s", argv[0],
                 argv[1] ? argv[1] : "", argv[1] && argv[2] ? argv[2] : "", r.status, r.out.p,
                 r.err.p);
    proc_capture_free(&r);
}

static bool find_program(const char *name, char *out, size_t len)
{
    const char *path = getenv("PATH");
    char dirs[4096];
    /* Tools such as ip live in sbin, which a user's PATH may lack. */
    snprintf(dirs, sizeof dirs, "%s:/usr/sbin:/sbin:/usr/bin:/bin", path ? path : "");
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, len, "%s/%s", d, name);
        if (access(out, X_OK) == 0)
            return true;
    }
    return false;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert(f != NULL, "cannot create %s: %s", path, strerror(errno));
    fputs(text, f);
    cr_assert(fclose(f) == 0, "cannot write %s: %s", path, strerror(errno));
}

static char *read_file(const char *path)
{
    struct proc_text b = {0};
    proc_text_append(&b, "", 0);
    FILE *f = fopen(path, "r");
    if (f) {
        char chunk[4096];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
            proc_text_append(&b, chunk, n);
        fclose(f);
    }
    return b.p;
}

static ino_t ns_inode(int i)
{
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, "/run/netns/%s", M.ns[i]);
    return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* The processes in namespace i other than its sshd listener, with their
 * command lines in report; with kill_them, they get SIGKILL too. */
static int ns_processes(int i, char *report, size_t len, bool kill_them)
{
    ino_t ino = ns_inode(i);
    int found = 0;
    size_t used = 0;
    report[0] = '\0';
    DIR *d = opendir("/proc");
    if (!d || !ino) {
        if (d)
            closedir(d);
        return 0;
    }
    for (struct dirent *e; (e = readdir(d));) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        pid_t pid = (pid_t)atoi(e->d_name);
        char path[300];
        struct stat st;
        snprintf(path, sizeof path, "/proc/%s/ns/net", e->d_name);
        if (pid == M.sshd[i] || pid == M.squatter || stat(path, &st) != 0 || st.st_ino != ino)
            continue;
        char cmd[512] = "";
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(cmd, 1, sizeof cmd - 1, f);
            fclose(f);
            for (size_t k = 0; k < n; k++)
                if (cmd[k] == '\0')
                    cmd[k] = ' ';
            cmd[n] = '\0';
        }
        found++;
        if (kill_them)
            kill(pid, SIGKILL);
        if (used < len) {
            int k = snprintf(report + used, len - used, "  %s: %.200s\n", e->d_name, cmd);
            used += k > 0 ? (size_t)k : 0;
        }
    }
    closedir(d);
    return found;
}

/* Processes anywhere whose command line holds tag. */
static int tagged_processes(const char *tag, char *report, size_t len)
{
    int found = proc_tagged(tag, report, len, "  ", false);
    return found > 0 ? found : 0;
}

/* ---- the two hosts ------------------------------------------------------- */

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static void ns_delete(const char *name)
{
    struct proc_capture r;
    run_in(&r, NULL, NULL, CMD_LIMIT_S, NULL, ARGS(M.ip, "netns", "delete", name));
    proc_capture_free(&r);
}

static void mh_down(void)
{
    if (M.squatter > 0) {
        kill(M.squatter, SIGKILL);
        waitpid(M.squatter, NULL, 0);
        M.squatter = 0;
    }
    for (int i = 0; i < 2; i++) {
        if (M.sshd[i] <= 0)
            continue;
        kill(M.sshd[i], SIGTERM);
        double end = harness_now() + 5.0;
        while (waitpid(M.sshd[i], NULL, WNOHANG) == 0 && harness_now() < end)
            nap(20);
        if (kill(M.sshd[i], 0) == 0) {
            kill(M.sshd[i], SIGKILL);
            waitpid(M.sshd[i], NULL, 0);
        }
        M.sshd[i] = 0;
    }
    for (int i = 0; i < 2; i++) {
        if (!M.ns_made[i])
            continue;
        /* Whatever a failed test left in there was started by the test. */
        char ignored[1];
        ns_processes(i, ignored, sizeof ignored, true);
        ns_delete(M.ns[i]);
        M.ns_made[i] = false;
    }
    if (M.dir[0]) {
        remove_dir(M.dir);
        M.dir[0] = '\0';
    }
}

/* Namespaces of earlier runs that were killed before their .fini. */
static void sweep_stale_namespaces(void)
{
    DIR *d = opendir("/run/netns");
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, NS_PREFIX, strlen(NS_PREFIX)) != 0)
            continue;
        int pid = atoi(e->d_name + strlen(NS_PREFIX));
        if (pid > 0 && kill(pid, 0) < 0 && errno == ESRCH)
            ns_delete(e->d_name);
    }
    closedir(d);
}

static void skip_setup(const char *why, const char *detail) __attribute__((noreturn));
static void skip_setup(const char *why, const char *detail)
{
    mh_down();
    cr_skip_test("%s%s%s", why, detail && *detail ? ": " : "", detail ? detail : "");
    abort(); /* cr_skip_test does not return */
}

static void start_sshd(int i)
{
    char conf[PATH_MAX + 32], log[PATH_MAX + 32], text[4 * PATH_MAX];
    snprintf(conf, sizeof conf, "%s/sshd_%d.conf", M.dir, i);
    snprintf(log, sizeof log, "%s/sshd_%d.log", M.dir, i);
    snprintf(text, sizeof text,
             "ListenAddress %s\n"
             "HostKey %s/host_key\n"
             "PidFile %s/sshd_%d.pid\n"
             "AuthorizedKeysFile %s/authorized_keys\n"
             "PermitRootLogin yes\n"
             "UsePAM no\n"
             "StrictModes no\n"
             "UseDNS no\n"
             "PasswordAuthentication no\n"
             "KbdInteractiveAuthentication no\n",
             addr[i], M.dir, M.dir, i, M.dir);
    write_file(conf, text);

    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        /* Should the test die before its .fini, sshd goes with it. ip netns
         * exec enters the namespace and execs sshd in this same process. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || nul < 0 || dup2(nul, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(126);
        execl(M.ip, "ip", "netns", "exec", M.ns[i], SSHD, "-f", conf, "-D", "-e", (char *)NULL);
        _exit(127);
    }
    M.sshd[i] = pid;

    double end = harness_now() + 20.0;
    for (;;) {
        char *text_log = read_file(log);
        bool listening = strstr(text_log, "Server listening on") != NULL;
        int status;
        bool died = waitpid(pid, &status, WNOHANG) == pid;
        if (died)
            M.sshd[i] = 0;
        cr_assert(!died, "sshd in %s exited at once:\n%s", M.ns[i], text_log);
        cr_assert(listening || harness_now() < end, "sshd in %s is not listening after 20 s:\n%s",
                  M.ns[i], text_log);
        free(text_log);
        if (listening)
            return;
        nap(20);
    }
}

/* Two namespaces, A (198.18.0.1) and B (198.18.0.2), joined by a veth pair,
 * each with an sshd that lets the test's key in as this user. */
static void mh_up(void)
{
    char ssh[PATH_MAX], keygen[PATH_MAX];
    if (geteuid() != 0)
        cr_skip_test("network namespaces and sshd need root");
    if (!find_program("ip", M.ip, sizeof M.ip))
        cr_skip_test("the ip command (iproute2) is not installed");
    if (access(SSHD, X_OK) != 0)
        cr_skip_test("%s (openssh-server) is not installed", SSHD);
    if (!find_program("ssh-keygen", keygen, sizeof keygen) || !find_program("ssh", ssh, sizeof ssh))
        cr_skip_test("ssh and ssh-keygen (openssh-client) are not installed");
    const char *build = getenv("HOOP_BUILD_DIR");
    if (!build || !*build)
        cr_skip_test("HOOP_BUILD_DIR is not set, so the built hooprun cannot be found "
                     "(run the suite with 'make test')");
    snprintf(M.hooprun, sizeof M.hooprun, "%s/hooprun", build);
    snprintf(M.ring_bench, sizeof M.ring_bench, "%s/ring_bench", build);
    cr_assert(access(M.hooprun, X_OK) == 0, "%s is not an executable", M.hooprun);
    cr_assert(access(M.ring_bench, X_OK) == 0, "%s is not an executable", M.ring_bench);

    sweep_stale_namespaces();
    for (int i = 0; i < 2; i++) {
        snprintf(M.ns[i], sizeof M.ns[i], NS_PREFIX "%d-%c", (int)getpid(), 'a' + i);
        struct proc_capture r;
        run_in(&r, NULL, NULL, CMD_LIMIT_S, NULL, ARGS(M.ip, "netns", "add", M.ns[i]));
        if (r.status != 0) {
            char why[512];
            snprintf(why, sizeof why, "%s%s", r.out.p, r.err.p);
            why[strcspn(why, "\n")] = '\0';
            proc_capture_free(&r);
            skip_setup("'ip netns add' was refused", why);
        }
        proc_capture_free(&r);
        M.ns_made[i] = true;
    }

    const char *tmpdir = getenv("TMPDIR");
    snprintf(M.dir, sizeof M.dir, "%s/hoop-multihost-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(M.dir)) {
        int e = errno;
        M.dir[0] = '\0';
        cr_assert_fail("mkdtemp: %s", strerror(e));
    }

    char veth[2][16];
    for (int i = 0; i < 2; i++)
        snprintf(veth[i], sizeof veth[i], "hm%d%c", (int)getpid() % 10000000, 'a' + i);
    must(ARGS(M.ip, "link", "add", veth[0], "netns", M.ns[0], "type", "veth", "peer", "name",
              veth[1], "netns", M.ns[1]));
    for (int i = 0; i < 2; i++) {
        char cidr[32];
        snprintf(cidr, sizeof cidr, "%s/24", addr[i]);
        must(ARGS(M.ip, "-n", M.ns[i], "addr", "add", cidr, "dev", veth[i]));
        must(ARGS(M.ip, "-n", M.ns[i], "link", "set", veth[i], "up"));
        must(ARGS(M.ip, "-n", M.ns[i], "link", "set", "lo", "up"));
    }

    char key[PATH_MAX + 32], pub[PATH_MAX + 32], auth[PATH_MAX + 32];
    snprintf(key, sizeof key, "%s/host_key", M.dir);
    must(ARGS(keygen, "-q", "-t", "ed25519", "-N", "", "-C", "hoop test host", "-f", key));
    snprintf(key, sizeof key, "%s/id", M.dir);
    must(ARGS(keygen, "-q", "-t", "ed25519", "-N", "", "-C", "hoop test client", "-f", key));
    snprintf(pub, sizeof pub, "%s/id.pub", M.dir);
    snprintf(auth, sizeof auth, "%s/authorized_keys", M.dir);
    char *text = read_file(pub);
    cr_assert(strncmp(text, "ssh-ed25519 ", 12) == 0, "ssh-keygen wrote no public key to %s", pub);
    write_file(auth, text);
    free(text);

    /* sshd's privilege separation needs it; packages create it at boot. */
    cr_assert(mkdir("/run/sshd", 0755) == 0 || errno == EEXIST, "mkdir /run/sshd: %s",
              strerror(errno));
    for (int i = 0; i < 2; i++)
        start_sshd(i);

    /* No config file of this user's may change what is tested; the host
     * keys are new for every test, so there is nothing to check them by. */
    snprintf(M.rsh, sizeof M.rsh,
             "%s -F none -i %s -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
             "-o LogLevel=ERROR",
             ssh, key);
}

/* hooprun with args, started in namespace A. */
static void hooprun_in_a(struct proc_capture *r, const char *cwd, const char *mark, const char *const *args)
{
    const char *argv[64];
    size_t n = 0;
    argv[n++] = M.hooprun;
    for (size_t i = 0; args[i]; i++) {
        cr_assert(n < 63, "too many arguments");
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    run_in(r, M.ns[0], cwd, RUN_LIMIT_S, mark, argv);
    cr_assert(r->status >= 0, "hooprun did not finish within %.0f s\nstdout:\n%s\nstderr:\n%s",
              RUN_LIMIT_S, r->out.p, r->err.p);
}

static bool has_line_starting(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = text; *p;) {
        if (strncmp(p, prefix, n) == 0)
            return true;
        const char *nl = strchr(p, '\n');
        if (!nl)
            break;
        p = nl + 1;
    }
    return false;
}

static void expect_good_ring_bench(const struct proc_capture *r)
{
    cr_assert_eq(r->status, 0, "exit status %d\nstdout:\n%s\nstderr:\n%s", r->status, r->out.p,
                 r->err.p);
    cr_assert(strstr(r->out.p, "[0] # Out of bounds values : 0 OK"),
              "no clean validation line in:\n%s\nstderr:\n%s", r->out.p, r->err.p);
}

/* ---- tests --------------------------------------------------------------- */

Test(multihost, ring_bench_over_ssh, .timeout = 240, .fini = mh_down)
{
    mh_up();
    struct proc_capture r;
    /* HOOP_LOG_LEVEL=info makes every rank say something, so that the
     * output of each, remote ones included, is seen to come back tagged. */
    hooprun_in_a(&r, NULL, NULL,
                 ARGS("--timeout", "90", "-np", "4", "-H", "198.18.0.1:2,198.18.0.2:2", "--rsh",
                      M.rsh, "-x", "HOOP_TCP_ENGINE", "-x", "HOOP_LOG_LEVEL=info", M.ring_bench,
                      "-b", "8", "-e", "1M"));
    expect_good_ring_bench(&r);
    for (int k = 0; k < 4; k++) {
        char tag[16];
        snprintf(tag, sizeof tag, "[%d] ", k);
        cr_assert(has_line_starting(r.out.p, tag) || has_line_starting(r.err.p, tag),
                  "no line from rank %d\nstdout:\n%s\nstderr:\n%s", k, r.out.p, r.err.p);
    }
    proc_capture_free(&r);
}

Test(multihost, failing_remote_rank_stops_every_rank, .timeout = 240, .fini = mh_down)
{
    mh_up();
    char tag[64];
    snprintf(tag, sizeof tag, "hoop-multihost-fail-%d", (int)getpid());
    struct proc_capture r;
    hooprun_in_a(&r, NULL, "[3] up",
                 ARGS("--timeout", "90", "-np", "4", "-H", "198.18.0.1:2,198.18.0.2:2", "--rsh",
                      M.rsh, "sh", "-c",
                      "echo up; if [ \"$HOOP_RANK\" = 3 ]; then sleep 1; exit 3; fi; sleep 100; : $1",
                      "sh", tag));

    /* The remote sessions may take a moment to close after hooprun. */
    char report[2][4096], tagged[4096];
    int left[2], ntagged;
    double end = harness_now() + 10.0;
    do {
        for (int i = 0; i < 2; i++)
            left[i] = ns_processes(i, report[i], sizeof report[i], false);
        ntagged = tagged_processes(tag, tagged, sizeof tagged);
        if (left[0] + left[1] + ntagged == 0)
            break;
        nap(50);
    } while (harness_now() < end);

    cr_assert_eq(r.status, 3, "exit status %d, expected the failed rank's 3\nstdout:\n%s\nstderr:\n%s",
                 r.status, r.out.p, r.err.p);
    cr_assert(strstr(r.err.p, "rank 3 on 198.18.0.2 exited with status 3"), "stderr:\n%s", r.err.p);
    cr_assert(r.mark_s >= 0, "rank 3 never said it was up\nstdout:\n%s", r.out.p);
    cr_assert_lt(r.elapsed_s - r.mark_s, 15.0, "the job took %.1f s to stop after rank 3 was up",
                 r.elapsed_s - r.mark_s);
    cr_assert_eq(ntagged, 0, "rank processes outlived the job:\n%s", tagged);
    cr_assert_eq(left[1], 0, "left behind on the remote host:\n%s", report[1]);
    cr_assert_eq(left[0], 0, "left behind on the local host:\n%s", report[0]);
    proc_capture_free(&r);
}

Test(multihost, hostfile_over_ssh, .timeout = 240, .fini = mh_down)
{
    mh_up();
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/hosts", M.dir);
    write_file(path, "# the two namespaces\n"
                     "198.18.0.1 slots=2\n"
                     "\n"
                     "198.18.0.2:2   # reached over ssh\n");
    struct proc_capture r;
    hooprun_in_a(&r, NULL, NULL,
                 ARGS("--timeout", "90", "-np", "4", "--hostfile", path, "--rsh", M.rsh, "-x",
                      "HOOP_TCP_ENGINE", M.ring_bench, "-b", "8", "-e", "64K"));
    expect_good_ring_bench(&r);
    proc_capture_free(&r);
}

/* Where each rank ran (by its network namespace), what it was told, and
 * that its arguments and a forwarded variable came through ssh intact. */
Test(multihost, remote_ranks_get_their_environment, .timeout = 240, .fini = mh_down)
{
    mh_up();
    static const char tricky[] = "it's \"quoted\" $HOME `x` \\ ;|&";
    cr_assert(setenv("HOOP_MH_VALUE", tricky, 1) == 0);
    struct proc_capture r;
    hooprun_in_a(&r, M.dir, NULL,
                 ARGS("--timeout", "90", "-np", "3", "-H", "198.18.0.2:2,198.18.0.1", "--rsh", M.rsh,
                      "-x", "HOOP_MH_VALUE", "sh", "-c",
                      "printf '%s|' \"$HOOP_RANK\" \"$HOOP_SIZE\" \"$HOOP_ROOT\" \"$PWD\" "
                      "\"$HOOP_MH_VALUE\" \"$(readlink /proc/self/ns/net)\" \"$@\"; echo",
                      "sh", "a  b", "it's", "$HOME"));
    cr_assert_eq(r.status, 0, "exit status %d\nstdout:\n%s\nstderr:\n%s", r.status, r.out.p, r.err.p);

    int port = -1;
    for (int k = 0; k < 3; k++) {
        /* Ranks 0 and 1 fill the first host, B; rank 2 runs where hooprun does. */
        int ns = k < 2 ? 1 : 0;
        char head[64], want[2 * PATH_MAX];
        snprintf(head, sizeof head, "[%d] %d|3|198.18.0.2:", k, k);
        const char *line = strstr(r.out.p, head);
        cr_assert(line, "no line starting '%s' in:\n%s", head, r.out.p);
        int p = atoi(line + strlen(head));
        cr_assert(port < 0 || p == port, "ranks disagree on the root port");
        port = p;
        snprintf(want, sizeof want, "%d|%s|%s|net:[%lu]|a  b|it's|$HOME|\n", p, M.dir, tricky,
                 (unsigned long)ns_inode(ns));
        cr_assert(strncmp(line + strlen(head), want, strlen(want)) == 0,
                  "rank %d: expected '%s%s', got '%.*s'", k, head, want,
                  (int)strcspn(line, "\n"), line);
    }
    cr_assert(port >= 20000 && port <= 59999, "root port %d is outside 20000..59999", port);
    proc_capture_free(&r);
}

/* A process in namespace i listening on a port of addr[i]; returns the
 * port. */
static int squat_port(int i)
{
    int ready[2];
    cr_assert(pipe2(ready, O_CLOEXEC) == 0, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        char path[128];
        snprintf(path, sizeof path, "/run/netns/%s", M.ns[i]);
        int nsfd = open(path, O_RDONLY | O_CLOEXEC);
        if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) < 0)
            _exit(1);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET};
        socklen_t len = sizeof a;
        inet_pton(AF_INET, addr[i], &a.sin_addr);
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 1) < 0 ||
            getsockname(fd, (struct sockaddr *)&a, &len) < 0)
            _exit(1);
        int port = ntohs(a.sin_port);
        if (write(ready[1], &port, sizeof port) != sizeof port)
            _exit(1);
        for (;;)
            pause();
    }
    M.squatter = pid;
    close(ready[1]);
    struct pollfd pf = {.fd = ready[0], .events = POLLIN};
    int port = 0;
    bool got = poll(&pf, 1, 10000) == 1 && read(ready[0], &port, sizeof port) == sizeof port;
    close(ready[0]);
    cr_assert(got && port > 0, "could not listen on a port of %s in %s", addr[i], M.ns[i]);
    return port;
}

/* A remote root's port cannot be probed; when it turns out to be taken,
 * rank 0 fails and the job stops instead of waiting for it. */
Test(multihost, taken_root_port_stops_the_job, .timeout = 240, .fini = mh_down)
{
    mh_up();
    char port[16];
    snprintf(port, sizeof port, "%d", squat_port(1));
    struct proc_capture r;
    hooprun_in_a(&r, NULL, NULL,
                 ARGS("--timeout", "90", "-np", "3", "-H", "198.18.0.2:1,198.18.0.1:2", "--port",
                      port, "--rsh", M.rsh, "-x", "HOOP_TCP_ENGINE", M.ring_bench, "-b", "8", "-e",
                      "64K"));
    cr_assert_neq(r.status, 0, "a job whose root could not listen succeeded\nstdout:\n%s", r.out.p);
    cr_assert(strstr(r.err.p, "rank 0 on 198.18.0.2 exited with status"),
              "hooprun does not name rank 0 as the one that failed:\n%s", r.err.p);
    cr_assert(strstr(r.err.p, "in use"), "rank 0 does not say the address is in use:\n%s", r.err.p);
    /* Well before the bootstrap timeout the other ranks would sit out. */
    cr_assert_lt(r.elapsed_s, 60.0, "took %.1f s", r.elapsed_s);
    proc_capture_free(&r);
}

/* test_layers.c - no layer of the library includes a header of a layer
 * above it. Reads every .c, .h and .cu of the library's folders under the source
 * tree (HOOP_SOURCE_DIR, else the current directory) and checks each
 * #include "..." of them. The layers, bottom-up:
 *
 *   include/ (the public header), common/
 *   bootstrap/            reduce/ (include/ and common/ only)
 *   transport/ and its subfolders    gpu/ (CUDA memory kinds, device kernels;
 *                                      may use reduce/half.h)
 *   ring/
 *   collectives/
 *   engine/ (calls only the public API, but may use common/)
 *
 * A file may include its own layer and any layer below it; reduce/ and
 * bootstrap/ stand side by side (neither includes the other), and so do
 * transport/ and gpu/. tools/,
 * bench/, tests/ and examples/ sit on top and may include anything, so
 * they are not read. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct layer {
    const char *dir;
    int level;
};

/* bootstrap and reduce share a level: a file of one may not include the
 * other (same level, another layer). */
static const struct layer layers[] = {
    {"include", 0}, {"common", 1},    {"bootstrap", 2},   {"reduce", 2},
    {"transport", 3}, {"gpu", 3}, {"ring", 4}, {"collectives", 5}, {"engine", 6},
};
#define NLAYERS (sizeof(layers) / sizeof(layers[0]))

/* The layer of a path relative to the source tree ("transport/tcp/tcp.h"),
 * or of an included name ("hoop.h" is include/'s), or NULL. */
static const struct layer *layer_of(const char *path)
{
    const char *slash = strchr(path, '/');
    if (!slash)
        return strcmp(path, "hoop.h") == 0 || strcmp(path, "hoop_engine.h") == 0 ? &layers[0]
                                                                                : NULL;
    for (size_t i = 0; i < NLAYERS; i++)
        if (strlen(layers[i].dir) == (size_t)(slash - path) &&
            strncmp(path, layers[i].dir, (size_t)(slash - path)) == 0)
            return &layers[i];
    return NULL;
}

static const char *source_dir(void)
{
    const char *d = getenv("HOOP_SOURCE_DIR");
    return d && *d ? d : ".";
}

struct scan {
    int files;
    int includes;
    char bad[4096]; /* the upward includes found, a line each */
    size_t bad_len;
};

static void note_bad(struct scan *s, const char *fmt, const char *a, int line, const char *b,
                     const char *c)
{
    if (s->bad_len < sizeof(s->bad))
        s->bad_len += (size_t)snprintf(s->bad + s->bad_len, sizeof(s->bad) - s->bad_len, fmt, a,
                                       line, b, c);
    if (s->bad_len > sizeof(s->bad))
        s->bad_len = sizeof(s->bad);
}

/* Check the #include "..." lines of rel (a path under the source tree). */
static void scan_file(struct scan *s, const char *rel)
{
    char path[8192];
    snprintf(path, sizeof(path), "%s/%s", source_dir(), rel);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot read %s", path);
    const struct layer *from = layer_of(rel);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof(line), f)) {
        n++;
        const char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p != '#')
            continue;
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncmp(p, "include", 7) != 0)
            continue;
        p += 7;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p != '"')
            continue; /* <system> headers */
        const char *end = strchr(p + 1, '"');
        if (!end)
            continue;
        char name[512];
        snprintf(name, sizeof(name), "%.*s", (int)(end - p - 1), p + 1);
        s->includes++;
        const struct layer *to = layer_of(name);
        if (!to)
            note_bad(s, "%s:%d includes \"%s\", which is in no layer%s\n", rel, n, name, "");
        else if (to != from && to->level >= from->level)
            note_bad(s, "%s:%d includes \"%s\", a header of %s/, which is not below it\n", rel, n,
                     name, to->dir);
    }
    fclose(f);
    s->files++;
}

/* Every .c and .h under rel, subfolders included. */
static void scan_dir(struct scan *s, const char *rel)
{
    char path[8192];
    snprintf(path, sizeof(path), "%s/%s", source_dir(), rel);
    DIR *d = opendir(path);
    cr_assert_not_null(d, "cannot read the folder %s (set HOOP_SOURCE_DIR to the source tree, "
                          "or run from it)", path);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sub[1024];
        snprintf(sub, sizeof(sub), "%s/%s", rel, e->d_name);
        char full[8192 + 1024];
        snprintf(full, sizeof(full), "%s/%s", source_dir(), sub);
        struct stat st;
        if (stat(full, &st) != 0)
            continue;
        size_t len = strlen(e->d_name);
        if (S_ISDIR(st.st_mode))
            scan_dir(s, sub);
        else if ((len > 2 && e->d_name[len - 2] == '.' &&
                  (e->d_name[len - 1] == 'c' || e->d_name[len - 1] == 'h')) ||
                 (len > 3 && strcmp(e->d_name + len - 3, ".cu") == 0))
            scan_file(s, sub);
    }
    closedir(d);
}

Test(layers, no_upward_include)
{
    struct scan s = {0};
    for (size_t i = 0; i < NLAYERS; i++)
        scan_dir(&s, layers[i].dir);
    /* Not a vacuous pass: the library has dozens of files and includes. */
    cr_assert_gt(s.files, 50, "read only %d files under %s", s.files, source_dir());
    cr_assert_gt(s.includes, 100, "found only %d #include \"...\" lines", s.includes);
    cr_assert_eq(s.bad_len, 0,
                 "a layer includes a header of a layer that is not below it (layers, bottom-up: "
                 "include/ common/ < bootstrap/ | reduce/ < transport/ | gpu/ < ring/ < collectives/); "
                 "move the code to the layer it belongs to or pass what it needs down:\n%s",
                 s.bad);
}

/* The checker itself tells the layers apart as the picture says. */
Test(layers, order_is_known)
{
    cr_assert_eq(layer_of("hoop.h"), &layers[0]);
    cr_assert_null(layer_of("stdio.h"));
    cr_assert_null(layer_of("tests/harness.h"));
    cr_assert_str_eq(layer_of("transport/tcp/tcp.h")->dir, "transport");
    cr_assert_lt(layer_of("common/log.h")->level, layer_of("reduce/reduce.h")->level);
    cr_assert_eq(layer_of("reduce/half.h")->level, layer_of("bootstrap/bootstrap.h")->level);
    cr_assert_lt(layer_of("transport/transport.h")->level, layer_of("ring/ring.h")->level);
    cr_assert_lt(layer_of("reduce/half.h")->level, layer_of("gpu/gpu.h")->level);
    cr_assert_eq(layer_of("gpu/gpu.h")->level, layer_of("transport/transport.h")->level);
    cr_assert_lt(layer_of("gpu/gpu.h")->level, layer_of("ring/ring.h")->level);
    cr_assert_lt(layer_of("ring/ring.h")->level, layer_of("collectives/comm.h")->level);
}

/* test_mr_cache.c - the transports' cache of memory registrations
 * (transport/mr_cache.c), with a registration that only counts: what is
 * found again, what is kept for how long under each policy, what makes
 * room, and that a failed registration leaves nothing behind. */
#include <criterion/criterion.h>

#include "transport/mr_cache.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

struct fake {
    int regs, deregs, live, fail_next;
};

static int fake_reg(void *ctx, struct hoop_mr *m)
{
    struct fake *f = ctx;
    if (f->fail_next) {
        f->fail_next = 0;
        return -ENOMEM;
    }
    f->regs++;
    f->live++;
    m->key = (uint64_t)f->regs;
    return 0;
}

static void fake_dereg(void *ctx, struct hoop_mr *m)
{
    struct fake *f = ctx;
    (void)m;
    f->deregs++;
    f->live--;
}

static const struct hoop_mr_ops fake_ops = {.reg = fake_reg, .dereg = fake_dereg};

static uint8_t *pages(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *p = aligned_alloc(page, n * page);
    cr_assert(p, "out of memory");
    return p;
}

Test(mr_cache, a_buffer_inside_a_registration_is_found_again)
{
    struct fake f = {0};
    struct hoop_mr_cache c;
    hoop_mr_init(&c, &fake_ops, &f, HOOP_MR_KEEP_ALWAYS, 8);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *buf = pages(4);
    struct hoop_mr *a, *b, *d;
    cr_assert_eq(hoop_mr_get(&c, buf + 10, 2 * page, &a), 0);
    cr_expect_eq(a->base, (uintptr_t)buf, "the registration starts at the page");
    cr_expect_eq(a->len, 3 * page, "and covers whole pages: %zu", a->len);
    cr_assert_eq(hoop_mr_get(&c, buf + page, 100, &b), 0);
    cr_expect_eq(a, b, "a buffer inside it is the same registration");
    cr_expect_eq(f.regs, 1);
    /* Past its end: a registration of its own. */
    cr_assert_eq(hoop_mr_get(&c, buf + 3 * page - 1, 2, &d), 0);
    cr_expect_neq(d, a);
    cr_expect_eq(f.regs, 2);
    cr_expect_eq(c.regs, 2ul);
    hoop_mr_put(&c, a);
    hoop_mr_put(&c, b);
    hoop_mr_put(&c, d);
    hoop_mr_idle(&c);
    cr_expect_eq(f.live, 2, "kept across calls: %d", f.live);
    hoop_mr_fini(&c);
    cr_expect_eq(f.live, 0);
    free(buf);
}

Test(mr_cache, a_request_registers_its_whole_region)
{
    struct fake f = {0};
    struct hoop_mr_cache c;
    hoop_mr_init(&c, &fake_ops, &f, HOOP_MR_KEEP_ALWAYS, 8);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *buf = pages(8);
    struct hoop_tp_req q1 = {.buf = buf + page, .len = 10, .region = buf, .region_len = 8 * page};
    struct hoop_tp_req q2 = {.buf = buf + 7 * page, .len = page, .region = buf,
                             .region_len = 8 * page};
    struct hoop_tp_req q3 = {.buf = buf + 7 * page, .len = 2 * page, .region = buf,
                             .region_len = 8 * page}; /* not inside its region: its own */
    struct hoop_mr *a, *b, *d;
    cr_assert_eq(hoop_mr_get_req(&c, &q1, &a), 0);
    cr_assert_eq(hoop_mr_get_req(&c, &q2, &b), 0);
    cr_expect_eq(a, b);
    cr_expect_eq(a->len, 8 * page);
    cr_expect_eq(f.regs, 1, "every chunk of a region is one registration");
    cr_assert_eq(hoop_mr_get_req(&c, &q3, &d), 0);
    cr_expect_eq(d->base, (uintptr_t)(buf + 7 * page));
    hoop_mr_put(&c, a);
    hoop_mr_put(&c, b);
    hoop_mr_put(&c, d);
    hoop_mr_fini(&c);
    free(buf);
}

Test(mr_cache, while_held_lives_only_while_held)
{
    struct fake f = {0};
    struct hoop_mr_cache c;
    hoop_mr_init(&c, &fake_ops, &f, HOOP_MR_KEEP_WHILE_HELD, 8);
    uint8_t *buf = pages(1);
    struct hoop_mr *a, *b;
    cr_assert_eq(hoop_mr_get(&c, buf, 64, &a), 0);
    cr_assert_eq(hoop_mr_get(&c, buf, 64, &b), 0);
    hoop_mr_put(&c, a);
    cr_expect_eq(f.live, 1, "still held once");
    hoop_mr_put(&c, b);
    cr_expect_eq(f.live, 0, "dropped when nobody holds it");
    cr_assert_eq(hoop_mr_get(&c, buf, 64, &a), 0);
    cr_expect_eq(f.regs, 2, "and registered again when asked again");
    hoop_mr_put(&c, a);
    hoop_mr_fini(&c);
    free(buf);
}

Test(mr_cache, until_idle_lives_until_the_call_ends)
{
    struct fake f = {0};
    struct hoop_mr_cache c;
    hoop_mr_init(&c, &fake_ops, &f, HOOP_MR_KEEP_UNTIL_IDLE, 8);
    uint8_t *x = pages(1), *y = pages(1);
    struct hoop_mr *a, *b;
    /* One call: chunk after chunk of the same buffer, one registration. */
    for (int k = 0; k < 5; k++) {
        cr_assert_eq(hoop_mr_get(&c, x, 64, &a), 0);
        hoop_mr_put(&c, a);
    }
    cr_expect_eq(f.regs, 1);
    cr_expect_eq(f.live, 1, "kept while the call goes on");
    /* Idle with y still held: x goes, y stays. */
    cr_assert_eq(hoop_mr_get(&c, y, 64, &b), 0);
    hoop_mr_idle(&c);
    cr_expect_eq(f.live, 1);
    cr_expect_eq(c.head, b, "the held registration is the one left");
    hoop_mr_put(&c, b);
    hoop_mr_idle(&c);
    cr_expect_eq(f.live, 0, "nothing is kept between calls");
    /* The next call registers x again: new pages there would be seen. */
    cr_assert_eq(hoop_mr_get(&c, x, 64, &a), 0);
    cr_expect_eq(f.regs, 3);
    hoop_mr_put(&c, a);
    hoop_mr_fini(&c);
    free(x);
    free(y);
}

Test(mr_cache, the_least_recently_used_unheld_one_makes_room)
{
    struct fake f = {0};
    struct hoop_mr_cache c;
    hoop_mr_init(&c, &fake_ops, &f, HOOP_MR_KEEP_ALWAYS, 2);
    uint8_t *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = pages(1);
    struct hoop_mr *m0, *m1, *m2, *again;
    cr_assert_eq(hoop_mr_get(&c, p[0], 8, &m0), 0);
    cr_assert_eq(hoop_mr_get(&c, p[1], 8, &m1), 0);
    hoop_mr_put(&c, m0);
    hoop_mr_put(&c, m1);
    /* p[0] used again: p[1] is now the least recently used. */
    cr_assert_eq(hoop_mr_get(&c, p[0], 8, &again), 0);
    hoop_mr_put(&c, again);
    cr_assert_eq(hoop_mr_get(&c, p[2], 8, &m2), 0);
    cr_expect_eq(c.n, 2);
    cr_expect_eq(f.deregs, 1);
    struct hoop_mr *look;
    cr_assert_eq(hoop_mr_get(&c, p[0], 8, &look), 0);
    cr_expect_eq(f.regs, 3, "p[0] was kept, p[1] made room");
    /* Every one held: the cache grows past its bound rather than drop one. */
    struct hoop_mr *m3;
    cr_assert_eq(hoop_mr_get(&c, p[3], 8, &m3), 0);
    cr_expect_eq(c.n, 3);
    cr_expect_eq(f.live, 3);
    hoop_mr_put(&c, look);
    hoop_mr_put(&c, m2);
    hoop_mr_put(&c, m3);
    hoop_mr_fini(&c);
    cr_expect_eq(f.live, 0);
    for (int i = 0; i < 4; i++)
        free(p[i]);
}

Test(mr_cache, a_failed_registration_leaves_nothing)
{
    struct fake f = {.fail_next = 1};
    struct hoop_mr_cache c;
    hoop_mr_init(&c, &fake_ops, &f, HOOP_MR_KEEP_ALWAYS, 8);
    uint8_t *buf = pages(1);
    struct hoop_mr *m = NULL;
    cr_expect_eq(hoop_mr_get(&c, buf, 8, &m), -ENOMEM);
    cr_expect_null(m, "no registration handed out");
    cr_expect_eq(c.n, 0);
    cr_expect_eq(c.regs, 0ul);
    cr_assert_eq(hoop_mr_get(&c, buf, 8, &m), 0, "the next try registers");
    hoop_mr_put(&c, m);
    hoop_mr_fini(&c);
    free(buf);
}

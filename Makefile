# hoop - build, test, install.
#   make                 libhoop.so / libhoop.a, hooprun, ring_bench (in build/)
#   make test            build and run the whole test suite
#   make bench           4-rank ring_bench on this machine (BENCH_ARGS=...)
#   make install PREFIX=/usr/local
#   make CC=clang        any C11 compiler; warnings are errors
CC       ?= cc
PREFIX   ?= /usr/local
BUILD    ?= build
OPT      ?= -O2
PKG_CONFIG ?= pkg-config

VERSION  := 0.1.0
SOMAJOR  := 0
SONAME   := libhoop.so.$(SOMAJOR)

URING_CFLAGS := $(shell $(PKG_CONFIG) --cflags liburing 2>/dev/null)
URING_LIBS   := $(shell $(PKG_CONFIG) --libs liburing 2>/dev/null || echo -luring)
CRIT_LIBS    := $(shell $(PKG_CONFIG) --libs criterion 2>/dev/null || echo -lcriterion)

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wno-unused-parameter
CFLAGS   ?= $(OPT) -g
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARN) -pthread -Iinclude -I. $(URING_CFLAGS) $(CFLAGS) \
             $(EXTRA_CFLAGS)
LIB_CFLAGS = $(ALL_CFLAGS) -fPIC -fvisibility=hidden $(ISA_FLAGS)
VERBS_LIBS   := $(shell $(PKG_CONFIG) --libs libibverbs 2>/dev/null || echo -libverbs)
LDLIBS   := $(URING_LIBS) $(VERBS_LIBS) -pthread -lm

LIB_SRCS := $(sort $(wildcard common/*.c bootstrap/*.c transport/*.c ring/*.c collectives/*.c \
                              engine/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
LIB_HDRS := $(wildcard include/*.h common/*.h bootstrap/*.h transport/*.h ring/*.h collectives/*.h \
                      engine/*.h)
TEST_SRCS := $(sort $(wildcard tests/*.c))
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/obj/%.o)

LIB_A    := $(BUILD)/libhoop.a
LIB_SO   := $(BUILD)/libhoop.so.$(VERSION)
PROGS    := $(BUILD)/hooprun $(BUILD)/ring_bench
TOOLS    := $(BUILD)/reduce_bench $(BUILD)/engine_bench
TESTBIN  := $(BUILD)/hoop_tests

.PHONY: all clean install test bench test-asan test-tsan test-valgrind fuzz
all: $(LIB_A) $(LIB_SO) $(PROGS) $(TOOLS)

# The reduction kernels are the hot loop: let the compiler vectorise them,
# once per instruction set; ring/reduce.c picks one at run time, so the
# library still runs on any CPU of the target (no -march).
$(BUILD)/obj/ring/reduce_%.o: OPT := -O3
ifneq ($(filter x86_64%,$(shell $(CC) -dumpmachine)),)
$(BUILD)/obj/ring/reduce_avx2.o: ISA_FLAGS := -mavx2 -mf16c
$(BUILD)/obj/ring/reduce_avx512.o: ISA_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq \
    -mf16c -mprefer-vector-width=512
endif

$(BUILD)/obj/%.o: %.c $(LIB_HDRS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) -c $< -o $@

$(LIB_A): $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(LIB_SO): $(LIB_OBJS)
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined -o $@ $^ $(LDLIBS) $(LDFLAGS)
	ln -sf libhoop.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $(BUILD)/libhoop.so

# Programs link the static library so that they run from the build tree.
$(BUILD)/hooprun: tools/hooprun.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LDFLAGS)

$(BUILD)/ring_bench: bench/ring_bench.c $(LIB_A) include/hoop.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_A) $(LDLIBS) $(LDFLAGS)

# Not installed: the reduction kernels beside memcpy (bench/RESULTS.md).
$(BUILD)/reduce_bench: bench/reduce_bench.c $(LIB_A) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_A) $(LDLIBS) $(LDFLAGS)

# Not installed: the engine's step of ResNet-50's gradients beside one
# blocking allreduce (hooprun -np N build/engine_bench).
$(BUILD)/engine_bench: bench/engine_bench.c $(LIB_A) include/hoop.h include/hoop_engine.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_A) $(LDLIBS) $(LDFLAGS)

# A test tool, not installed: runs a program with io_uring refused.
$(BUILD)/no_uring: tools/no_uring.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LDFLAGS)

$(TESTBIN): $(TEST_OBJS) $(LIB_A)
	$(CC) $(ALL_CFLAGS) -o $@ $(TEST_OBJS) $(LIB_A) $(CRIT_LIBS) $(LDLIBS) $(LDFLAGS)

$(BUILD)/obj/tests/%.o: tests/%.c $(LIB_HDRS) $(wildcard tests/*.h) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# TEST_ARGS passes options to Criterion (e.g. TEST_ARGS='--filter=allreduce/*').
# The suite starts real ranks as processes; the tests find hooprun and
# ring_bench through HOOP_BUILD_DIR. It runs in passes, TEST_PASSES naming
# which: uring, all of it on io_uring; poll, the multi-process suites (and
# those of failures) again on poll; nouring, the allreduce suite where
# io_uring is refused, so that auto really falls back; zerocopy, the
# collectives and failures with every send zero-copy (HOOP_TCP_ZEROCOPY=1);
# ofi-tcp and ofi-shm, the multi-process suites over the libfabric
# transport on its tcp and its shm provider; ofi-write, with payloads
# written (HOOP_OFI_WRITE_BYTES=64K, off by default), the allreduce and
# collective suites over the tcp provider and the mismatch suite over shm
# (libfabric 1.17's rxm can segfault in fi_close after a mismatch cut a
# write short: about 1 run in 40 of mismatch::chunk_bytes; hoop warns);
# verbs, the verbs suite and the multi-process suites over the verbs
# transport, on this machine's RDMA device when it has one, else in a qemu
# guest with a Soft-RoCE device (tests/vm; skipped, saying why, where no
# guest can run).
TEST_PASSES ?= uring poll nouring zerocopy ofi-tcp ofi-shm ofi-write verbs
MP_SUITES := @(allreduce|bootstrap|collectives|faults|mismatch|paths|soak)/*
OFI_SUITES := @(allreduce|collectives|faults|mismatch|paths|soak)/*
# The verbs pass runs in an emulated guest where no RDMA device is here, a
# 64 MiB allreduce taking seconds there: the verbs suite, the collective
# suites at N = 1..4, every fault and every mismatch (about 5 minutes).
VERBS_SUITES := @(verbs/*|allreduce/ranks_[1-4]|collectives/*ranks_[1-4]|faults/*|mismatch/*|paths/*_n[34]|paths/same_bits_on_every_rank_ring)
HOOP_TEST_VM_TIMEOUT ?= 1800
TEST_ENV = HOOP_BUILD_DIR=$(abspath $(BUILD)) HOOP_SOURCE_DIR=$(CURDIR)
TEST_RUN = $(TESTBIN) --jobs 2
test: all $(TESTBIN) $(BUILD)/no_uring
	@set -e; for pass in $(TEST_PASSES); do \
	    echo "== tests: $$pass"; \
	    case $$pass in \
	    uring) $(TEST_ENV) HOOP_TCP_ENGINE=uring $(TEST_RUN) $(TEST_ARGS) ;; \
	    poll) $(TEST_ENV) HOOP_TCP_ENGINE=poll $(TEST_RUN) --filter='$(MP_SUITES)' $(TEST_ARGS) ;; \
	    nouring) $(TEST_ENV) HOOP_TCP_ENGINE=auto $(BUILD)/no_uring $(TEST_RUN) \
	        --filter='allreduce/*' $(TEST_ARGS) ;; \
	    zerocopy) $(TEST_ENV) HOOP_TCP_ENGINE=uring HOOP_TCP_ZEROCOPY=1 $(TEST_RUN) \
	        --filter='@(allreduce|collectives|faults)/*' $(TEST_ARGS) ;; \
	    ofi-tcp) $(TEST_ENV) HOOP_TRANSPORT=ofi FI_PROVIDER=tcp $(TEST_RUN) \
	        --filter='$(OFI_SUITES)' $(TEST_ARGS) ;; \
	    ofi-shm) $(TEST_ENV) HOOP_TRANSPORT=ofi FI_PROVIDER=shm $(TEST_RUN) \
	        --filter='$(OFI_SUITES)' $(TEST_ARGS) ;; \
	    ofi-write) $(TEST_ENV) HOOP_TRANSPORT=ofi FI_PROVIDER=tcp HOOP_OFI_WRITE_BYTES=64K \
	        $(TEST_RUN) --filter='@(allreduce|collectives)/*' $(TEST_ARGS); \
	        $(TEST_ENV) HOOP_TRANSPORT=ofi FI_PROVIDER=shm HOOP_OFI_WRITE_BYTES=64K \
	        $(TEST_RUN) --filter='mismatch/*' $(TEST_ARGS) ;; \
	    verbs) $(TEST_ENV) HOOP_TEST_VM_TIMEOUT=$(HOOP_TEST_VM_TIMEOUT) tests/vm/suite.sh $(BUILD) \
	        --jobs 2 --filter='$(VERBS_SUITES)' $(TEST_ARGS) ;; \
	    *) echo "unknown test pass $$pass"; exit 2 ;; \
	    esac; \
	done

# The suite under ASan and UBSan, in its own build tree: every engine's
# code (io_uring, poll, libfabric) once, ASAN_PASSES. The suite's ranks are
# forked processes, so every rank runs instrumented too.
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
ASAN_PASSES ?= uring poll ofi-shm
test-asan:
	ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	    UBSAN_OPTIONS=print_stacktrace=1 \
	    $(MAKE) BUILD=$(BUILD)/asan OPT=-O1 EXTRA_CFLAGS="$(ASAN_FLAGS)" LDFLAGS="$(ASAN_FLAGS)" \
	    TEST_PASSES="$(ASAN_PASSES)" test

# The suite under TSan on the io_uring engine (TSAN_PASSES; libfabric's own
# threads are not instrumented, and ASan covers poll), in its own build tree (gcc: clang puts its TSan
# runtime in programs only, and libhoop.so is linked with --no-undefined).
# tests/tsan_arena.c lets Criterion start beside TSan's memory layout, the
# harness forks ranks so that TSan keeps checking them, and halt_on_error
# makes a race fail the test it happens in.
TSAN_FLAGS := -fsanitize=thread
TSAN_PASSES ?= uring
test-tsan:
	TSAN_OPTIONS=halt_on_error=1 \
	    $(MAKE) BUILD=$(BUILD)/tsan OPT=-O1 EXTRA_CFLAGS="$(TSAN_FLAGS)" LDFLAGS="$(TSAN_FLAGS)" \
	    TEST_PASSES="$(TSAN_PASSES)" test

# valgrind's memcheck on 4-rank jobs of ring_bench, each rank under
# valgrind: an allreduce on each TCP engine (io_uring and poll) and an
# alltoall (whose connections are made on first use). Any error, and any
# block lost (definitely, indirectly or possibly) when a rank exits, fails.
VALGRIND := valgrind -q --error-exitcode=3 --leak-check=full \
    --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible
test-valgrind: all
	HOOP_TCP_ENGINE=uring $(BUILD)/hooprun -np 4 $(VALGRIND) $(BUILD)/ring_bench -b 8 -e 16M -f 8 -n 2 -w 1
	HOOP_TCP_ENGINE=poll $(BUILD)/hooprun -np 4 $(VALGRIND) $(BUILD)/ring_bench -b 8 -e 16M -f 8 -n 2 -w 1
	$(BUILD)/hooprun -np 4 $(VALGRIND) $(BUILD)/ring_bench -C alltoall -b 8 -e 1M -f 8 -n 2 -w 1

# libFuzzer on the parsers of what arrives from the network, FUZZ_SECONDS
# each (clang only). New inputs go to build/fuzz/corpus-*, the saved seeds
# stay as they are; malloc_limit_mb turns any unbounded allocation into a
# failure.
FUZZ_SECONDS ?= 20
FUZZ_CC ?= clang
FUZZ_FLAGS := -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -g -O1
FUZZ_TARGETS := hello peers
FUZZ_SRCS_hello := common/wire.c
FUZZ_SRCS_peers := common/wire.c bootstrap/peer.c
fuzz: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
	@for t in $(FUZZ_TARGETS); do \
	    mkdir -p $(BUILD)/fuzz/corpus-$$t; \
	    echo "== fuzz $$t for $(FUZZ_SECONDS) s"; \
	    $(BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -malloc_limit_mb=64 \
	        -rss_limit_mb=1024 -print_final_stats=1 $(BUILD)/fuzz/corpus-$$t \
	        tests/fuzz/corpus/$$t 2>&1 | tail -n 12 || exit 1; \
	done
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(LIB_HDRS) Makefile
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE $(WARN) -Iinclude -I. $(FUZZ_FLAGS) -o $@ $< $(FUZZ_SRCS_$*)

# The main job: a 4-rank allreduce benchmark on this machine.
BENCH_ARGS ?= -b 8 -e 256M -f 4
bench: all
	$(BUILD)/hooprun -np 4 $(BUILD)/ring_bench $(BENCH_ARGS)

install: all
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/hoop.h $(DESTDIR)$(PREFIX)/include/hoop.h
	install -m 644 include/hoop_engine.h $(DESTDIR)$(PREFIX)/include/hoop_engine.h
	install -m 644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/libhoop.a
	install -m 755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/libhoop.so.$(VERSION)
	ln -sf libhoop.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libhoop.so
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    -e 's|@URING_LIBS@|$(URING_LIBS)|g' hoop.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/hoop.pc

clean:
	rm -rf $(BUILD)

# hoop - build, test, install.
#   make                 libhoop.so / libhoop.a, hooprun, ring_bench (in build/)
#   make check           the quick tier of the tests (about a minute), for every edit
#   make test            build and run the whole test suite, before a push
#   make bench           4-rank ring_bench on this machine (BENCH_ARGS=...)
#   make install PREFIX=/usr/local
#   make CC=clang        any C11 compiler; warnings are errors
CC       ?= cc
PREFIX   ?= /usr/local
BUILD    ?= build
OPT      ?= -O2
PKG_CONFIG ?= pkg-config
# The Python package (pure Python over libhoop.so, docs/python.md): PYTHONPATH=$(PYDIR).
PYDIR    ?= $(PREFIX)/lib/python3/dist-packages

VERSION  := 0.1.0
SOMAJOR  := 0
SONAME   := libhoop.so.$(SOMAJOR)

URING_CFLAGS := $(shell $(PKG_CONFIG) --cflags liburing 2>/dev/null)
# liburing goes inside libhoop (Debian's liburing.a is position independent),
# so that the library and the programs start where liburing.so.2 is not
# installed (Ubuntu 24.04's images); where no liburing.a is found, libhoop
# links liburing.so as before (URING_LIBS).
URING_A      := $(abspath $(wildcard $(shell $(CC) -print-file-name=liburing.a)))
ifeq ($(URING_A),)
URING_LIBS   := $(shell $(PKG_CONFIG) --libs liburing 2>/dev/null || echo -luring)
URING_OBJS   :=
else
URING_LIBS   :=
URING_OBJS   := $(BUILD)/obj/liburing/.extracted
endif
CRIT_LIBS    := $(shell $(PKG_CONFIG) --libs criterion 2>/dev/null || echo -lcriterion)

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wno-unused-parameter
CFLAGS   ?= $(OPT) -g
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARN) -pthread -Iinclude -I. $(URING_CFLAGS) $(CFLAGS) \
             $(GPU_CFLAGS) $(EXTRA_CFLAGS)
LIB_CFLAGS = $(ALL_CFLAGS) -fPIC -fvisibility=hidden $(ISA_FLAGS)
# libibverbs is opened at run time (transport/verbs/lib.c), as libfabric is;
# only the tests, which look at the RDMA devices themselves, link it.
VERBS_LIBS   := $(shell $(PKG_CONFIG) --libs libibverbs 2>/dev/null || echo -libverbs)
# nettle (HMAC-SHA256 for the token handshake) is linked in statically and
# its symbols kept out of libhoop.so's exports: it adds no NEEDED entry.
NETTLE_LIBS := -l:libnettle.a
LDLIBS    = $(URING_LIBS) $(CUDA_LIBS) $(NETTLE_LIBS) -pthread -lm -ldl

# CUDA (gpu/): built when nvcc is found ($(CUDA_HOME)/bin/nvcc, CUDA_HOME
# defaulting to /usr/local/cuda), unless CUDA=0; CUDA=1 insists. The runtime
# is linked statically (cudart_static), so libhoop never needs libcuda.so
# to load; kernels for sm_80 and sm_90, and PTX for later GPUs.
CUDA      ?= auto
CUDA_HOME ?= /usr/local/cuda
NVCC      := $(if $(filter 0,$(CUDA)),,$(wildcard $(CUDA_HOME)/bin/nvcc))
ifeq ($(CUDA)$(NVCC),1)
$(error CUDA=1, but there is no $(CUDA_HOME)/bin/nvcc (set CUDA_HOME))
endif
NVCC_GENCODE := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                -gencode arch=compute_90,code=compute_90
ifneq ($(NVCC),)
CUDA_CFLAGS := -DHOOP_HAVE_CUDA -I$(CUDA_HOME)/include
CUDA_LIBS   := -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt
CUDA_SRCS   := $(sort $(wildcard gpu/*.cu))
GPU_SAY     := gpu/ built with CUDA ($(NVCC)); make CUDA=0 leaves it out
else
GPU_SAY     := gpu/ built without CUDA ($(if $(filter 0,$(CUDA)),CUDA=0,no $(CUDA_HOME)/bin/nvcc)): every buffer is host memory
endif

LIB_SRCS := $(sort $(wildcard common/*.c bootstrap/*.c transport/*.c transport/*/*.c reduce/*.c \
                               gpu/*.c ring/*.c collectives/*.c engine/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o) $(CUDA_SRCS:%.cu=$(BUILD)/obj/%.cu.o)
LIB_HDRS := $(wildcard include/*.h common/*.h bootstrap/*.h transport/*.h transport/*/*.h reduce/*.h \
                       gpu/*.h ring/*.h collectives/*.h engine/*.h)
TEST_SRCS := $(sort $(wildcard tests/*.c))
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/obj/%.o)

LIB_A    := $(BUILD)/libhoop.a
LIB_SO   := $(BUILD)/libhoop.so.$(VERSION)
PROGS    := $(BUILD)/hooprun $(BUILD)/ring_bench
TOOLS    := $(BUILD)/reduce_bench $(BUILD)/engine_bench $(BUILD)/line_floor $(BUILD)/hostwide_bench \
            $(BUILD)/pair_floor
TESTBIN  := $(BUILD)/hoop_tests

.PHONY: all clean install check test bench build-asan build-tsan test-asan test-tsan test-valgrind fuzz
all: $(LIB_A) $(LIB_SO) $(PROGS) $(TOOLS)

# The reduction kernels are the hot loop: let the compiler vectorise them,
# once per instruction set; reduce/reduce.c picks one at run time, so the
# library still runs on any CPU of the target (no -march).
$(BUILD)/obj/reduce/generic.o $(BUILD)/obj/reduce/avx2.o $(BUILD)/obj/reduce/avx512.o: OPT := -O3
ifneq ($(filter x86_64%,$(shell $(CC) -dumpmachine)),)
$(BUILD)/obj/reduce/avx2.o: ISA_FLAGS := -mavx2 -mf16c
$(BUILD)/obj/reduce/avx512.o: ISA_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq \
    -mf16c -mprefer-vector-width=512
endif

# gpu/ and the tests of it see the CUDA runtime's headers, nothing else does.
$(BUILD)/obj/gpu/%.o $(BUILD)/obj/tests/test_gpu.o $(BUILD)/obj/tests/test_gpu_alloc.o \
    $(BUILD)/obj/tests/test_gpu_coll.o: \
    GPU_CFLAGS = $(CUDA_CFLAGS)

$(BUILD)/obj/%.cu.o: %.cu $(LIB_HDRS) Makefile
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -O3 $(NVCC_GENCODE) -Iinclude -I. -Xcompiler -fPIC,-fvisibility=hidden,-fno-exceptions,-fno-threadsafe-statics \
	    -c $< -o $@

$(BUILD)/obj/%.o: %.c $(LIB_HDRS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) -c $< -o $@

# liburing's members, for libhoop.a (libhoop.so links the archive itself).
$(BUILD)/obj/liburing/.extracted: $(URING_A)
	@rm -rf $(dir $@); mkdir -p $(dir $@)
	cd $(dir $@) && ar x $(URING_A)
	@touch $@

$(LIB_A): $(LIB_OBJS) $(URING_OBJS)
	@rm -f $@
	ar rcs $@ $(LIB_OBJS) $(if $(URING_OBJS),$(filter-out %/.extracted,$(wildcard $(BUILD)/obj/liburing/*)))

# --exclude-libs: liburing's functions stay inside, not exported.
$(LIB_SO): $(LIB_OBJS)
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined -Wl,--exclude-libs,ALL -o $@ \
	    $(LIB_OBJS) $(URING_A) $(LDLIBS) $(LDFLAGS)
	@echo "hoop: $(GPU_SAY)"
	ln -sf libhoop.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $(BUILD)/libhoop.so

# Programs link the static library so that they run from the build tree.
HOOPRUN_SRCS := $(sort $(wildcard tools/hooprun/*.c))
$(BUILD)/hooprun: $(HOOPRUN_SRCS) tools/hooprun/hooprun.h Makefile
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $(HOOPRUN_SRCS) $(LDFLAGS)

RING_BENCH_SRCS := $(sort $(wildcard bench/ring_bench/*.c))
$(BUILD)/ring_bench: $(RING_BENCH_SRCS) bench/ring_bench/ring_bench.h $(LIB_A) include/hoop.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $(RING_BENCH_SRCS) $(LIB_A) $(LDLIBS) $(LDFLAGS)

# Not installed: the reduction kernels beside memcpy (bench/RESULTS.md).
$(BUILD)/reduce_bench: bench/reduce_bench.c $(LIB_A) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_A) $(LDLIBS) $(LDFLAGS)

# Not installed: the engine's step of ResNet-50's gradients beside one
# blocking allreduce (hooprun -np N build/engine_bench).
$(BUILD)/engine_bench: bench/engine_bench.c $(LIB_A) include/hoop.h include/hoop_engine.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_A) $(LDLIBS) $(LDFLAGS)

# Not installed: forming a job and the first alltoall's connection set-up
# (hooprun -np N build/form_bench; bench/RESULTS.md).
$(BUILD)/form_bench: bench/form_bench.c $(LIB_A) include/hoop.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_A) $(LDLIBS) $(LDFLAGS)

# Not installed: the copies and kernels a device allreduce queues on the
# GPU, by size (hooprun -np N build/gpu_ops; bench/RESULTS.md).
$(BUILD)/gpu_ops: bench/gpu_ops.c $(LIB_A) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_A) $(LDLIBS) $(LDFLAGS)

# Not installed: the ceiling of an allreduce through one segment that
# every rank of a host maps (build/hostwide_bench -n N; bench/RESULTS.md).
$(BUILD)/hostwide_bench: bench/hostwide_bench.c $(LIB_A) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_A) $(LDLIBS) $(LDFLAGS)

# Not installed: one cache line each way between two processes, the floor
# under a small allreduce of two ranks (bench/small_latency.py).
$(BUILD)/line_floor: bench/line_floor.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LDFLAGS)

# Not installed: the least memory a large allreduce of two ranks on one
# host must move, timed (bench/RESULTS.md, issue 18's N = 2 target).
# (-O3 in the recipe: a target's OPT would pass to the library it needs.)
$(BUILD)/pair_floor: bench/pair_floor.c $(LIB_A) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O3 -o $@ $< $(LIB_A) $(LDLIBS) $(LDFLAGS)

# A test tool, not installed: runs a program with io_uring refused.
$(BUILD)/no_uring: tools/no_uring.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LDFLAGS)

$(TESTBIN): $(TEST_OBJS) $(LIB_A)
	$(CC) $(ALL_CFLAGS) -o $@ $(TEST_OBJS) $(LIB_A) $(CRIT_LIBS) $(VERBS_LIBS) $(LDLIBS) $(LDFLAGS)

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
# guest can run); python, the Python package (hoop, hoop.torch) on 1..4
# ranks under hooprun with /usr/bin/python3 or HOOP_PYTHON (skipped, saying
# why, without torch, numpy or pytest there; HOOP_TEST_REQUIRE_PYTHON=1
# makes that a failure); gpuemu, the collective, fault and mismatch suites
# with every buffer taken for device memory and the device pipeline run
# over host memory (HOOP_GPU_EMULATE=1, docs/gpu.md), then the collective
# suites again with sends from "device" memory as under GPUDirect RDMA
# (HOOP_GPU_DIRECT=1); shm, the multi-process suites and the shm suite with
# shared memory between the ranks (HOOP_SHM=auto, the default: the tests that
# put ranks in network namespaces of their own still cross them over tcp),
# then the collective, fault, mismatch and shm suites again with large
# payloads read in place (HOOP_SHM_SINGLE_COPY=1); every other pass sets
# HOOP_SHM=0, so that it tests the transport it names.
TEST_PASSES ?= uring poll nouring zerocopy ofi-tcp ofi-shm ofi-write verbs python gpuemu shm
MP_SUITES := @(allreduce|async|auth|bootstrap|collectives|faults|gpucoll|hier|mismatch|paths|soak|split)/*
OFI_SUITES := @(allreduce|collectives|faults|gpucoll|mismatch|paths|soak)/*
# The verbs pass runs in an emulated guest where no RDMA device is here, a
# 64 MiB allreduce taking seconds there: the verbs suite, the collective
# suites at N = 1..4, every fault and every mismatch (about 5 minutes).
VERBS_SUITES := @(verbs/*|hier/two_hosts_of_two_interleaved_exact|allreduce/ranks_[1-4]|collectives/*ranks_[1-4]|faults/*|mismatch/*|paths/*_n[34]|paths/same_bits_on_every_rank_ring|gpucoll/allreduce_ranks_2|gpucoll/reduce_scatter_ranks_3|gpucoll/bounded_pinned_memory_ranks_3)
# And device buffers (emulated) whose sends leave from "device" memory, as
# under GPUDirect RDMA.
VERBS_GDR_SUITES := @(gpucoll/allreduce_ranks_2|gpucoll/broadcast_ranks_3)
HOOP_TEST_VM_TIMEOUT ?= 1800
TEST_ENV = HOOP_BUILD_DIR=$(abspath $(BUILD)) HOOP_SOURCE_DIR=$(CURDIR)
# The passes named after a transport test that transport, not shared memory.
NET_ENV = $(TEST_ENV) HOOP_SHM=0
TEST_RUN = $(abspath $(TESTBIN)) --jobs 2
# The tests run in a scratch directory, so that what a crash leaves in the
# current directory (a library's backtrace file, such as libfabric's psm
# provider writes when a rank segfaults) never lands in the source tree; the
# run ends by naming anything left there.
TEST_CWD ?= $(abspath $(BUILD))/test-cwd
TEST_IN_CWD = rm -rf $(TEST_CWD); mkdir -p $(TEST_CWD); cd $(TEST_CWD); \
	trap 'left=$$(ls -A); [ -z "$$left" ] || echo "tests left in $(TEST_CWD):" $$left' EXIT
# Where io_uring is refused (a container's seccomp profile), the uring pass
# runs on what auto picks, poll, its io_uring tests skipped saying why, and
# the zerocopy pass (io_uring only) is skipped.
URING_REFUSED = HOOP_TCP_ENGINE=uring $(abspath $(BUILD))/hooprun -np 2 \
	$(abspath $(BUILD))/ring_bench -b 8 -e 8 -n 1 -w 0 2>&1 | grep -q 'io_uring cannot be set up'
test: all $(TESTBIN) $(BUILD)/no_uring
	@set -e; $(TEST_IN_CWD); uring=uring; \
	if $(URING_REFUSED); then uring=; \
	    echo "== io_uring is refused here: the uring pass runs on poll, zerocopy is skipped"; fi; \
	for pass in $(TEST_PASSES); do \
	    echo "== tests: $$pass"; t0=$$(date +%s); \
	    case $$pass in \
	    uring) $(NET_ENV) HOOP_TCP_ENGINE=$${uring:-auto} $(TEST_RUN) $(TEST_ARGS) ;; \
	    poll) $(NET_ENV) HOOP_TCP_ENGINE=poll $(TEST_RUN) --filter='$(MP_SUITES)' $(TEST_ARGS) ;; \
	    nouring) $(NET_ENV) HOOP_TCP_ENGINE=auto $(abspath $(BUILD))/no_uring $(TEST_RUN) \
	        --filter='allreduce/*' $(TEST_ARGS) ;; \
	    zerocopy) [ -n "$$uring" ] || { echo "skipped: zero-copy sends need io_uring"; continue; }; \
	        $(NET_ENV) HOOP_TCP_ENGINE=uring HOOP_TCP_ZEROCOPY=1 $(TEST_RUN) \
	        --filter='@(allreduce|collectives|faults)/*' $(TEST_ARGS) ;; \
	    ofi-tcp) $(NET_ENV) HOOP_TRANSPORT=ofi FI_PROVIDER=tcp $(TEST_RUN) \
	        --filter='$(OFI_SUITES)' $(TEST_ARGS) ;; \
	    ofi-shm) $(NET_ENV) HOOP_TRANSPORT=ofi FI_PROVIDER=shm $(TEST_RUN) \
	        --filter='$(OFI_SUITES)' $(TEST_ARGS) ;; \
	    ofi-write) $(NET_ENV) HOOP_TRANSPORT=ofi FI_PROVIDER=tcp HOOP_OFI_WRITE_BYTES=64K \
	        $(TEST_RUN) --filter='@(allreduce|collectives)/*' $(TEST_ARGS); \
	        $(NET_ENV) HOOP_TRANSPORT=ofi FI_PROVIDER=shm HOOP_OFI_WRITE_BYTES=64K \
	        $(TEST_RUN) --filter='mismatch/*' $(TEST_ARGS) ;; \
	    verbs) $(NET_ENV) HOOP_TEST_VM_TIMEOUT=$(HOOP_TEST_VM_TIMEOUT) $(CURDIR)/tests/vm/suite.sh \
	        $(abspath $(BUILD)) \
	        --jobs 2 --filter='$(VERBS_SUITES)' $(TEST_ARGS); \
	        $(NET_ENV) HOOP_GPU_DIRECT=1 HOOP_TEST_VM_TIMEOUT=$(HOOP_TEST_VM_TIMEOUT) \
	        $(CURDIR)/tests/vm/suite.sh $(abspath $(BUILD)) \
	        --jobs 2 --filter='$(VERBS_GDR_SUITES)' $(TEST_ARGS) ;; \
	    python) $(TEST_ENV) $(CURDIR)/tests/python/run.sh $(abspath $(BUILD)) ;; \
	    gpuemu) $(TEST_ENV) HOOP_GPU_EMULATE=1 $(TEST_RUN) \
	        --filter='@(allreduce|collectives|faults|mismatch|paths|async)/*' $(TEST_ARGS); \
	        $(TEST_ENV) HOOP_GPU_EMULATE=1 HOOP_GPU_DIRECT=1 $(TEST_RUN) \
	        --filter='@(allreduce|collectives)/*' $(TEST_ARGS) ;; \
	    shm) $(TEST_ENV) HOOP_SHM=auto $(TEST_RUN) --filter='@($(MP_SUITES)|shm/*)' $(TEST_ARGS); \
	        $(TEST_ENV) HOOP_SHM=auto HOOP_SHM_SINGLE_COPY=1 $(TEST_RUN) \
	        --filter='@(allreduce|collectives|faults|mismatch|shm)/*' $(TEST_ARGS) ;; \
	    *) echo "unknown test pass $$pass"; exit 2 ;; \
	    esac; \
	    echo "== tests: $$pass took $$(( $$(date +%s) - t0 )) s"; \
	done

# The quick tier, for every edit: the unit suites and the multi-process
# suites at N <= 4 (no soak, no 2 GiB buffer, the faults that need no
# deadline to pass), on one engine: HOOP_TCP_ENGINE=auto, io_uring, or
# poll where io_uring is refused. About a minute on 2 idle cores; make
# test stays the whole suite, for before a push.
CHECK_UNIT := api|packaging|gpu|gdr|gpu_alloc|wire|auth|reduce|mr_cache|netif|launcher|hooprun|ring_bench|bootstrap|engine|mismatch|layers|async
CHECK_FAULTS := sigkill_a_rank_mid_allreduce|garbage_in_the_middle_of_a_stream|root_dies_during_*
CHECK_MP := split/*|allreduce/ranks_[1-4]|allreduce/default_chunks_4_ranks_f32|collectives/*ranks_[1-4]|hier/*
CHECK_PATHS := paths/*_n[34]|paths/same_bits_on_every_rank_ring|faults/@($(CHECK_FAULTS))
CHECK_TESTS := @(@($(CHECK_UNIT))/*|$(CHECK_MP)|$(CHECK_PATHS))
check: all $(TESTBIN) $(BUILD)/no_uring
	@set -e; $(TEST_IN_CWD); echo "== check: unit suites and N <= 4 on one engine"; \
	$(TEST_ENV) HOOP_TCP_ENGINE=auto $(TEST_RUN) --filter='$(CHECK_TESTS)' $(TEST_ARGS)

# The suite under ASan and UBSan, in its own build tree: every engine's
# code once, ASAN_PASSES: the io_uring pass (whose engine suite runs the
# poll engine too: striped, busy-polling, a peer leaving) and libfabric's
# shm. poll's whole pass is not run again here: test-valgrind checks poll
# on 4-rank jobs as well. The suite's ranks are forked processes, so every
# rank runs instrumented too.
# build-asan builds that tree without running anything.
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
ASAN_PASSES ?= uring ofi-shm shm
ASAN_MAKE = $(MAKE) BUILD=$(BUILD)/asan OPT=-O1 EXTRA_CFLAGS="$(ASAN_FLAGS)" LDFLAGS="$(ASAN_FLAGS)"
build-asan:
	+$(ASAN_MAKE) all $(BUILD)/asan/hoop_tests $(BUILD)/asan/no_uring
test-asan:
	+ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	    UBSAN_OPTIONS=print_stacktrace=1 $(ASAN_MAKE) TEST_PASSES="$(ASAN_PASSES)" test

# TSan finds races between the threads of one process, so the suite under
# TSan is the tests whose processes run two threads through hoop at once
# (TSAN_SUITES): the engine's thread beside the caller's (the async suite,
# the engine on device buffers), and hoop_comm_abort or exit on another
# thread mid-collective (faults). The library makes no thread but the
# engine's (test-tsan checks that pthread_create is called in
# engine/loop.c alone: a new thread fails it until its suites are added
# here), so every other test's processes have one thread and nothing to
# race. They run on the io_uring engine and over shared memory
# (TSAN_PASSES; libfabric's own threads are not instrumented), in its own
# build tree (gcc: clang puts its TSan runtime in programs only, and
# libhoop.so is linked with --no-undefined). tests/tsan_arena.c lets
# Criterion start beside TSan's memory layout, the harness forks ranks so
# that TSan keeps checking them, and halt_on_error makes a race fail the
# test it happens in.
TSAN_FLAGS := -fsanitize=thread
TSAN_PASSES ?= uring shm
TSAN_SUITES := @(async/*|gpucoll/engine_*|faults/*_on_another_thread_*)
TSAN_THREADS := engine/loop.c
TSAN_MAKE = $(MAKE) BUILD=$(BUILD)/tsan OPT=-O1 EXTRA_CFLAGS="$(TSAN_FLAGS)" LDFLAGS="$(TSAN_FLAGS)"
build-tsan:
	+$(TSAN_MAKE) all $(BUILD)/tsan/hoop_tests $(BUILD)/tsan/no_uring
test-tsan:
	@made=$$(grep -l 'pthread_create' $(LIB_SRCS) $(CUDA_SRCS) | tr '\n' ' '); \
	[ "$$made" = "$(TSAN_THREADS) " ] || { echo "test-tsan: pthread_create is called in" \
	    "$${made% } where TSAN_THREADS says $(TSAN_THREADS): add the suites that run a" \
	    "new thread to TSAN_SUITES and its file to TSAN_THREADS"; exit 1; }
	+TSAN_OPTIONS=halt_on_error=1 $(TSAN_MAKE) TEST_PASSES="$(TSAN_PASSES)" \
	    TEST_ARGS="--filter='$(TSAN_SUITES)'" test

# valgrind's memcheck on 4-rank jobs of ring_bench, each rank under
# valgrind: an allreduce on each TCP engine (io_uring and poll), an
# alltoall (whose connections are made on first use) and an allreduce in
# memory from hoop_mem_alloc (ring_bench -R). Any error, and any
# block lost (definitely, indirectly or possibly) when a rank exits, fails.
VALGRIND := valgrind -q --error-exitcode=3 --leak-check=full \
    --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible
test-valgrind: all
	HOOP_TCP_ENGINE=uring $(BUILD)/hooprun -np 4 $(VALGRIND) $(BUILD)/ring_bench -b 8 -e 16M -f 8 -n 2 -w 1
	HOOP_TCP_ENGINE=poll $(BUILD)/hooprun -np 4 $(VALGRIND) $(BUILD)/ring_bench -b 8 -e 16M -f 8 -n 2 -w 1
	$(BUILD)/hooprun -np 4 $(VALGRIND) $(BUILD)/ring_bench -C alltoall -b 8 -e 1M -f 8 -n 2 -w 1
	$(BUILD)/hooprun -np 4 $(VALGRIND) $(BUILD)/ring_bench -R -b 8 -e 16M -f 8 -n 2 -w 1

# libFuzzer on the parsers of what arrives from the network, FUZZ_SECONDS
# each (clang only). New inputs go to build/fuzz/corpus-*, an input that
# fails to build/fuzz/crash-*, the saved seeds stay as they are;
# malloc_limit_mb turns any unbounded allocation into a failure.
FUZZ_SECONDS ?= 20
FUZZ_CC ?= clang
FUZZ_FLAGS := -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -g -O1
FUZZ_TARGETS := hello peers auth slot list
FUZZ_SRCS_hello := common/wire.c
FUZZ_SRCS_peers := common/wire.c bootstrap/peer.c
FUZZ_SRCS_slot := transport/shm/slot.c
FUZZ_SRCS_list := engine/wire.c common/status.c common/log.c common/param.c
FUZZ_SRCS_auth := common/wire.c common/auth.c common/sock.c common/status.c common/log.c common/param.c
FUZZ_LIBS_auth := $(NETTLE_LIBS)
fuzz: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
	@for t in $(FUZZ_TARGETS); do \
	    mkdir -p $(BUILD)/fuzz/corpus-$$t; \
	    echo "== fuzz $$t for $(FUZZ_SECONDS) s"; \
	    $(BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -malloc_limit_mb=64 \
	        -rss_limit_mb=1024 -print_final_stats=1 -artifact_prefix=$(BUILD)/fuzz/ \
	        $(BUILD)/fuzz/corpus-$$t tests/fuzz/corpus/$$t > $(BUILD)/fuzz/$$t.log 2>&1; \
	    rc=$$?; tail -n 12 $(BUILD)/fuzz/$$t.log; \
	    [ $$rc = 0 ] || { echo "fuzz $$t failed (exit $$rc): $(BUILD)/fuzz/$$t.log"; exit 1; }; \
	done
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(LIB_HDRS) Makefile
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE $(WARN) -Iinclude -I. $(FUZZ_FLAGS) -o $@ $< $(FUZZ_SRCS_$*) $(FUZZ_LIBS_$*)

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
	    -e 's|@URING_LIBS@|$(URING_LIBS) $(CUDA_LIBS)|g' hoop.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/hoop.pc
	install -d $(DESTDIR)$(PYDIR)/hoop/torch
	install -m 644 $(wildcard python/hoop/*.py) $(DESTDIR)$(PYDIR)/hoop/
	install -m 644 $(wildcard python/hoop/torch/*.py) $(DESTDIR)$(PYDIR)/hoop/torch/

clean:
	rm -rf $(BUILD)

#!/usr/bin/env bash
# tests/vm/suite.sh - run hoop's test suite over the verbs transport: on
# this machine when it has an RDMA device with an ACTIVE port, else in the
# qemu guest of tests/vm, whose Soft-RoCE device (rxe0) is a real verbs
# device in an emulated machine.
#
#   tests/vm/suite.sh BUILD_DIR [CRITERION_ARG...]
#
# HOOP_TRANSPORT=verbs is set for the suite; the caller's other HOOP_*
# variables and ASAN_OPTIONS, LSAN_OPTIONS, UBSAN_OPTIONS and TSAN_OPTIONS
# reach it too (in the guest through run.sh -e). A sanitizer build's
# runtime goes into the guest when its tests are named in
# HOOP_TEST_VM_BINS (build/asan/hoop_tests). Exit status: the
# suite's; 0 with a line saying why when neither a device nor the guest can
# run here (no qemu, no network for the guest's packages), unless
# HOOP_TEST_REQUIRE_VERBS=1, which makes that a failure (77).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: tests/vm/suite.sh BUILD_DIR [CRITERION_ARG...]" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
shift

# A device of this machine, not a software one (rxe, siw), with an ACTIVE port.
native=
for st in /sys/class/infiniband/*/ports/*/state; do
    [ -r "$st" ] || continue
    dev=${st#/sys/class/infiniband/}
    dev=${dev%%/*}
    case "$dev" in rxe* | siw*) continue ;; esac
    grep -q ACTIVE "$st" && native=$dev && break
done

if [ -n "$native" ]; then
    echo "tests/vm/suite.sh: the verbs suite on this machine's $native"
    HOOP_TRANSPORT=verbs HOOP_BUILD_DIR=$build HOOP_SOURCE_DIR=$repo "$build/hoop_tests" "$@"
    exit $?
fi

# In the guest: the caller's HOOP_* and sanitizer variables, then the
# suite's own.
envs=()
while IFS= read -r kv; do
    case "$kv" in HOOP_TEST_VM_*) continue ;; esac
    envs+=(-e "$kv")
done < <(env | grep -E '^(HOOP_[A-Za-z0-9_]*|[AULT]SAN_OPTIONS)=' || true)
envs+=(-e HOOP_TRANSPORT=verbs -e "HOOP_BUILD_DIR=$build" -e "HOOP_SOURCE_DIR=$repo")
# In the guest too the suite runs in the caller's directory (make test's
# scratch one, inside the shared tree), not at the top of the tree.
cmd=(sh -c 'cd "$1" 2>/dev/null; shift; exec "$@"' sh "$PWD" "$build/hoop_tests" "$@")
echo "tests/vm/suite.sh: no RDMA device here; the verbs suite in a qemu guest with Soft-RoCE (rxe0)"
"$here/run.sh" "${envs[@]}" "$repo" "${cmd[@]}"
rc=$?
if [ $rc = 77 ]; then
    if [ "${HOOP_TEST_REQUIRE_VERBS:-0}" = 1 ]; then
        echo "tests/vm/suite.sh: SKIPPED, and HOOP_TEST_REQUIRE_VERBS=1 makes that a failure" >&2
        exit 77
    fi
    echo "tests/vm/suite.sh: SKIPPED the verbs suite (no RDMA device and no guest here; the reason is above)" >&2
    exit 0
fi
exit $rc

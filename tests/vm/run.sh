#!/usr/bin/env bash
# tests/vm/run.sh - run a command in a qemu guest that has a Soft-RoCE device.
#
#   tests/vm/run.sh [-e VAR=VAL]... DIR CMD [ARG...]
#
# Boots the guest that tests/vm/build.sh makes (run first, and kept up to
# date, by this script), shares DIR read-write over virtio-9p at the same
# absolute path, and runs CMD there: one argument runs under `sh -c`, several
# as an argv. The guest has lo, dummy0 = 192.0.2.1/24 and the rxe0 verbs
# device on it (port 1 ACTIVE, GID index 1 = ::ffff:192.0.2.1), unlimited
# locked memory, tmpfs /tmp and /dev/shm, and no NIC. The command's
# environment is the -e variables plus HOOP_TEST_VM=1, HOOP_TEST_VM_IBDEV=rxe0,
# HOOP_TEST_VM_IP=192.0.2.1, HOOP_TEST_VM_GID_INDEX=1, HOOP_TEST_VM_NETDEV=dummy0, PATH, HOME.
#
# Its stdout and stderr are streamed to ours as it runs. Exit status: the
# command's; 124 when it ran out of time; 125 when the guest or its setup
# failed (the guest console is printed then); 77 when no VM can run on this
# machine (one line says why).
#
# Environment:
#   HOOP_TEST_VM_TIMEOUT  seconds for the whole run, boot included (default 600)
#   HOOP_TEST_VM_SMP      guest CPUs (default 2)
#   HOOP_TEST_VM_MEM      guest memory in MiB (default 2048)
#   HOOP_TEST_VM_ACCEL    qemu accelerator (default tcg; kvm runs -cpu host)
#   HOOP_TEST_VM_CACHE    where build.sh keeps the image (default build/vm)
#   HOOP_TEST_VM_CONSOLE=1  print the guest console afterwards, whatever happened
#   HOOP_TEST_VM_VERBOSE=1  print a timing line
#   HOOP_TEST_VM_SHELL=1    interactive shell on the guest console instead of CMD
#                      (Ctrl-A x quits qemu); CMD may be left out
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${HOOP_TEST_VM_CACHE:-$repo/build/vm}
me=tests/vm/run.sh

usage() {
    echo "usage: $me [-e VAR=VAL]... DIR CMD [ARG...]" >&2
    exit 125
}
# sq WORD: WORD quoted for sh
sq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

envs=()
while [ $# -gt 0 ]; do
    case "$1" in
        -e)
            [ $# -ge 2 ] || usage
            [[ "$2" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "$me: -e wants VAR=VALUE, not '$2'" >&2; exit 125; }
            envs+=("$2")
            shift 2 ;;
        -e*)
            [[ "${1#-e}" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "$me: -e wants VAR=VALUE, not '${1#-e}'" >&2; exit 125; }
            envs+=("${1#-e}")
            shift ;;
        -h | --help) sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
        --) shift; break ;;
        -*) usage ;;
        *) break ;;
    esac
done
shell=${HOOP_TEST_VM_SHELL:-}
[ $# -ge 2 ] || { [ -n "$shell" ] && [ $# -ge 1 ]; } || usage
[ -d "$1" ] || { echo "$me: no directory $1" >&2; exit 125; }
dir=$(cd "$1" && pwd -P)
shift

timeout_s=${HOOP_TEST_VM_TIMEOUT:-600}
[[ "$timeout_s" =~ ^[0-9]+$ ]] && [ "$timeout_s" -gt 0 ] ||
    { echo "$me: HOOP_TEST_VM_TIMEOUT must be a number of seconds" >&2; exit 125; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hoop-vm.XXXXXX") || exit 125
qpid=
cleanup() {
    [ -n "$qpid" ] && kill "$qpid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# -- the image: build or check it; a machine that cannot have it skips
if ! HOOP_TEST_VM_CACHE=$cache "$here/build.sh" 2> "$tmp/build.log"; then
    rc=$?
    if [ $rc = 77 ]; then
        tail -n 1 "$tmp/build.log" >&2
        exit 77
    fi
    cat "$tmp/build.log" >&2
    echo "$me: tests/vm/build.sh failed (exit $rc)" >&2
    exit 125
fi
if ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
    echo "tests/vm: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)." >&2
    exit 77
fi
cache=$(cd "$cache" && pwd)

# -- what the guest reads: conf for init, cmd for sh
mkdir "$tmp/ctl"
ctl=$tmp/ctl
# the guest gives up on the command a little before we give up on the guest
limit=$((timeout_s > 60 ? timeout_s - 15 : timeout_s * 3 / 4))
[ "$limit" -gt 0 ] || limit=1
{
    echo "dir=$(sq "$dir")"
    echo "limit=$limit"
} > "$ctl/conf"
{
    echo "export HOOP_TEST_VM=1"
    for kv in "${envs[@]}"; do echo "export $(sq "$kv")"; done
    if [ $# -eq 1 ]; then
        printf '%s\n' "$1"
    elif [ $# -gt 1 ]; then
        printf 'exec'
        for a in "$@"; do printf ' %s' "$(sq "$a")"; done
        echo
    fi
} > "$ctl/cmd"
: > "$ctl/stdout"
: > "$ctl/stderr"

accel=${HOOP_TEST_VM_ACCEL:-tcg}
cpu=max
[[ "$accel" == kvm* ]] && cpu=host
share() { echo "local,path=${1//,/,,},mount_tag=$2,security_model=none,multidevs=remap,id=$2"; }
qemu=(qemu-system-x86_64 -nodefaults -no-user-config
      -machine "pc,accel=$accel" -cpu "$cpu"
      -smp "${HOOP_TEST_VM_SMP:-2}" -m "${HOOP_TEST_VM_MEM:-2048}"
      -display none -no-reboot -nic none
      -kernel "$cache/kernel/kernel" -initrd "$cache/initramfs.cpio.gz"
      -virtfs "$(share "$ctl" hoopctl)" -virtfs "$(share "$dir" hoopwork)")
append="console=ttyS0 quiet panic=-1 mitigations=off"

if [ -n "$shell" ]; then
    "${qemu[@]}" -serial mon:stdio -append "$append hoop_vm.shell=1"
    exit $?
fi

start=$(date +%s.%N)
timeout -k 10 "$timeout_s" "${qemu[@]}" -serial "file:$tmp/console" -append "$append" \
    > "$tmp/qemu.log" 2>&1 < /dev/null &
qpid=$!
# stream the command's output while it runs; tail stops once qemu has gone
tail -q -s 0.2 --pid=$qpid -c +1 -f "$ctl/stdout" &
out_pid=$!
tail -q -s 0.2 --pid=$qpid -c +1 -f "$ctl/stderr" >&2 &
err_pid=$!
wait $qpid
qrc=$?
qpid=
wait $out_pid $err_pid
end=$(date +%s.%N)

console() {
    echo "--- guest console ---"
    tr -d '\r' < "$tmp/console" 2>/dev/null
    cat "$tmp/qemu.log"
    echo "--- end of guest console ---"
}
rc=$(cat "$ctl/rc" 2>/dev/null)
if [ -n "${HOOP_TEST_VM_VERBOSE:-}" ]; then
    ready=
    [ -f "$ctl/ready" ] &&
        ready=" ready_s=$(echo "$start $(stat -c %.3Y "$ctl/ready")" | awk '{ printf "%.2f", $2 - $1 }')"
    echo "$me: wall_s=$(echo "$start $end" | awk '{ printf "%.2f", $2 - $1 }')$ready" \
         "$(cat "$ctl/timing" 2>/dev/null) qemu_rc=$qrc rc=${rc:-none}" >&2
fi
[ -n "${HOOP_TEST_VM_CONSOLE:-}" ] && console >&2

if [ -z "$rc" ]; then
    if [ $qrc = 124 ] || [ $qrc = 137 ]; then
        echo "$me: the guest ran out of time after ${timeout_s} s (HOOP_TEST_VM_TIMEOUT)" >&2
        [ -n "${HOOP_TEST_VM_CONSOLE:-}" ] || console | tail -n 40 >&2
        exit 124
    fi
    [ -n "${HOOP_TEST_VM_CONSOLE:-}" ] || console >&2
    echo "$me: the guest stopped without running the command (qemu exit $qrc)" >&2
    exit 125
fi
if [ "$rc" = 125 ] && [ -f "$ctl/why" ]; then
    [ -n "${HOOP_TEST_VM_CONSOLE:-}" ] || console >&2
    echo "$me: guest setup failed: $(cat "$ctl/why")" >&2
    exit 125
fi
if [ "$rc" = 124 ]; then
    echo "$me: the command ran out of time after $limit s in the guest (HOOP_TEST_VM_TIMEOUT=$timeout_s)" >&2
fi
exit "$rc"

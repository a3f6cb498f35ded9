#!/bin/sh
# tests/vm/init.sh - /init of the test guest (busybox sh, PID 1).
#
# Mounts the pseudo file systems, loads the modules listed by build.sh, brings
# up lo and a Soft-RoCE device rxe0 on dummy0 (192.0.2.1/24), mounts the
# control share (tag hoopctl) and the work directory (tag hoopwork, at the
# path run.sh names), runs the command and powers the machine off.
#
# Control share, written by run.sh: conf (dir=, limit=), cmd (the script).
# Written here: ready (device up), stdout, stderr, timing, rc; why when the
# setup failed (rc 125). Kernel command line: hoop_vm.shell=1 gives a shell on
# the console instead of the command.
export PATH=/usr/bin:/usr/sbin
export HOME=/root
umask 022

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o mode=0620,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs -o mode=1777,nosuid,nodev shm /dev/shm
mount -t tmpfs -o mode=1777 tmp /tmp
mount -t tmpfs -o mode=0755 run /run
ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/0 /dev/stdin
ln -s /proc/self/fd/1 /dev/stdout
ln -s /proc/self/fd/2 /dev/stderr
hostname hoop-vm

ctl=/run/hoop-vm
ip=192.0.2.1
gid1=0000:0000:0000:0000:0000:ffff:c000:0201   # ::ffff:192.0.2.1, RoCEv2
t0=$(cut -d' ' -f1 /proc/uptime)

log() { echo "hoop-vm: $*" > /dev/console; }
fail() {
    log "setup failed: $*"
    echo "$*" > "$ctl/why"
    echo 125 > "$ctl/rc"
    sync
    poweroff -f
}

shell=0
for a in $(cat /proc/cmdline); do
    [ "$a" = hoop_vm.shell=1 ] && shell=1
done

kver=$(cat /etc/hoop-vm/kernel-release)
while read -r m; do
    insmod "/lib/modules/$kver/$m" 2>/dev/null && continue
    n=${m##*/}
    n=${n%.ko}
    grep -q "^$(echo "$n" | tr - _) " /proc/modules || log "insmod $m failed"
done < /etc/hoop-vm/modules

mkdir -p "$ctl"
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=mmap hoopctl "$ctl"; then
    [ $shell = 1 ] || fail "cannot mount the control share (9p tag hoopctl)"
fi
dir= limit=
[ -f "$ctl/conf" ] && . "$ctl/conf"

ip link set lo up || fail "ip link set lo up"
ip link set dummy0 up || fail "no dummy0"
ip addr add $ip/24 dev dummy0 || fail "ip addr add $ip/24 dev dummy0"
rdma link add rxe0 type rxe netdev dummy0 || fail "rdma link add rxe0 type rxe netdev dummy0"
i=0
while :; do
    st=$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)
    gid=$(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null)
    [ "$st" = "4: ACTIVE" ] && [ "$gid" = $gid1 ] && [ -c /dev/infiniband/uverbs0 ] && break
    i=$((i + 1))
    [ $i -lt 300 ] || fail "rxe0 not ready after 30 s: state '$st', gid 1 '$gid'"
    sleep 0.1
done

if [ -n "$dir" ]; then
    mkdir -p "$dir"
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=mmap hoopwork "$dir" ||
        fail "cannot mount the work directory at $dir (9p tag hoopwork)"
    cd "$dir" || fail "cd $dir"
fi

# verbs memory registration pins pages: no cap on locked memory
ulimit -l unlimited

if [ $shell = 1 ]; then
    log "rxe0 up on dummy0 ($ip); shell in $(pwd); exit powers off"
    setsid cttyhack sh -l
    cd /
    sync
    poweroff -f
fi

t1=$(cut -d' ' -f1 /proc/uptime)
: > "$ctl/ready"

# The command runs in its own session, so that it and everything it forks can
# be killed as one process group; it sees a clean environment plus what
# run.sh put at the top of cmd.
env -i PATH=/usr/bin:/usr/sbin HOME=/root \
    HOOP_TEST_VM_IBDEV=rxe0 HOOP_TEST_VM_IP=$ip HOOP_TEST_VM_GID_INDEX=1 HOOP_TEST_VM_NETDEV=dummy0 \
    setsid sh "$ctl/cmd" >> "$ctl/stdout" 2>> "$ctl/stderr" < /dev/null &
pid=$!
wd=
if [ -n "$limit" ]; then
    (
        sleep "$limit"
        : > /run/timed-out
        {
            echo "hoop-vm: the command ran out of time after $limit s; its processes:"
            ps -o pid,ppid,stat,time,args 2>/dev/null || ps
        } >> "$ctl/stderr"
        kill -KILL -- "-$pid"
    ) &
    wd=$!
fi
wait $pid
rc=$?
kill -KILL -- "-$pid" 2>/dev/null
[ -n "$wd" ] && kill "$wd" 2>/dev/null
[ -f /run/timed-out ] && rc=124
t2=$(cut -d' ' -f1 /proc/uptime)

echo "boot_s=$t1 setup_s=$(echo "$t0 $t1" | awk '{ print $2 - $1 }') cmd_s=$(echo "$t1 $t2" | awk '{ print $2 - $1 }')" > "$ctl/timing"
cd /
[ -n "$dir" ] && umount "$dir" 2>/dev/null
echo $rc > "$ctl/rc"
umount "$ctl" 2>/dev/null
sync
poweroff -f

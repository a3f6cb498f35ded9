#!/usr/bin/env bash
# netns.sh - hoop on shaped links: one network namespace per rank, joined by
# veth pairs to a bridge, every link shaped by TBF to one rate.
#
#   bench/netns.sh [-n N] [-p PER_HOST] [-i] [-R RATE] [-C CC] [-r REPS]
#                  [-s SYSTEMS] [-a ANCHORS] [-o DIR] [-k] [-- ring_bench options]
#   bench/netns.sh -c            only remove what this script creates
#
# It builds namespaces hoopnet-r0 .. hoopnet-r<N-1> (interface hn0, address
# 198.18.10.<rank+1>/24 from the benchmarking range RFC 2544 sets aside) and
# hoopnet-br (the bridge, 198.18.10.254). Both directions of each rank's link
# are shaped to RATE: the rank's egress in its namespace, the bridge port's
# egress in hoopnet-br, so every rank has a full-duplex NIC of RATE. No
# address or route outside these namespaces is touched, and all of it goes
# on exit, on Ctrl-C and on SIGTERM (-k keeps it for a look with ip netns).
#
# Then, REPS times, interleaved so that every system sees the same machine:
#   iperf   iperf3 goodput of one link (rank 0 to rank 1, one stream, 5 s),
#           and of all N ring links at once (rank i to i+1);
#   hoop    ring_bench, rank i in namespace i with host name hoopnet-r<i>
#           (bootstrap on rank 0's address);
#   gloo    Gloo's ring_chunked allreduce, from the baseline harness in -a;
#   ompi    OpenMPI allreduce with the TCP BTL on hn0, from the same harness.
# SYSTEMS defaults to "iperf hoop", and to "iperf hoop gloo ompi" with -a.
# Every benchmark line also records the bytes the shaped qdiscs sent during
# it, which proves the traffic crossed the shaped links.
#
# Raw outputs go to DIR (default bench/results/netns/<RATE>_N<N>), one file a
# system and repeat; a table of medians (busbw, and its ratio to one link's
# iperf3 goodput) is printed at the end by bench/summarize.py.
#
# Hosts of several ranks: -p PER_HOST puts N / PER_HOST "hosts" up, each a
# namespace (hoopnet-r<h>, address 198.18.10.<h+1>) whose ranks share its
# host name, so that they talk through shared memory and only the host's
# link is shaped; rank r is on host r / PER_HOST, or with -i on host
# r mod (N / PER_HOST), the ranks of the hosts interleaved as some
# launchers give them. iperf3 then measures the hosts' links; gloo and
# ompi need one rank per host.
#
# Options: -n ranks (default 2, at most 32); -R TBF rate in tc's syntax
# (default 2gbit); -C TCP congestion control of every namespace (default:
# the one new namespaces get, this host's), for every system and iperf3
# alike; -r repeat indices (default "1 2 3"); -o output directory.
# ring_bench options after -- replace the default "-b 16M -e 256M -f 4 -n 5
# -w 2". Env: HOOP_* variables are passed to every hoop rank; BUILD (default
# build) is where ring_bench is. Needs root, iproute2 and iperf3.
set -euo pipefail

HERE="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$HERE/build}"
N=2
PER=1
INTERLEAVE=0
RATE=2gbit
CC=""
REPS="1 2 3"
SYSTEMS=""
ANCHORS=""
OUT=""
KEEP=0
CLEAN_ONLY=0
while getopts "n:p:iR:C:r:s:a:o:kch" opt; do
    case $opt in
    n) N="$OPTARG" ;;
    p) PER="$OPTARG" ;;
    i) INTERLEAVE=1 ;;
    R) RATE="$OPTARG" ;;
    C) CC="$OPTARG" ;;
    r) REPS="$OPTARG" ;;
    s) SYSTEMS="$OPTARG" ;;
    a) ANCHORS="$(cd "$OPTARG" && pwd)" ;;
    o) OUT="$OPTARG" ;;
    k) KEEP=1 ;;
    c) CLEAN_ONLY=1 ;;
    h) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
BENCH_ARGS=("$@")
((${#BENCH_ARGS[@]})) || BENCH_ARGS=(-b 16M -e 256M -f 4 -n 5 -w 2)
[[ -n "$SYSTEMS" ]] || { SYSTEMS="iperf hoop"; [[ -n "$ANCHORS" ]] && SYSTEMS+=" gloo ompi"; }
HOSTS_TAG=""
if ((PER > 1)); then HOSTS_TAG="_p$PER"; if ((INTERLEAVE)); then HOSTS_TAG+=i; fi; fi
OUT="${OUT:-$HERE/bench/results/netns/${RATE}_N$N$HOSTS_TAG}"

NSP=hoopnet-r
BRNS=hoopnet-br
IFACE=hn0
NET=198.18.10
MAXN=32

die() { echo "netns.sh: $*" >&2; exit 1; }
log() { echo "[$(date +%T)] $*" >&2; }
has() { [[ " $SYSTEMS " == *" $1 "* ]]; }

[[ $EUID -eq 0 ]] || die "needs root (ip netns, tc)"
[[ "$N" =~ ^[0-9]+$ ]] && ((N >= 2 && N <= MAXN)) || die "-n must be 2..$MAXN, not '$N'"
[[ "$PER" =~ ^[0-9]+$ ]] && ((PER >= 1 && N % PER == 0 && N / PER >= 2)) ||
    die "-p must divide -n into at least 2 hosts, not '$PER'"
H=$((N / PER)) # hosts, each a namespace
host_of() { if ((INTERLEAVE)); then echo $(($1 % H)); else echo $(($1 / PER)); fi; }
((PER == 1)) || ! { has gloo || has ompi; } || die "gloo and ompi run one rank per host (-p 1)"
[[ "${RATE,,}" =~ ^[0-9]+(k|m|g)?bit$ ]] || die "-R takes a tc rate such as 2gbit or 500mbit, not '$RATE'"
if [[ -n "$CC" ]]; then
    grep -qw -- "$CC" /proc/sys/net/ipv4/tcp_available_congestion_control ||
        die "-C $CC: this kernel has only $(cat /proc/sys/net/ipv4/tcp_available_congestion_control)"
fi

ns_exists() { ip netns list | awk '{print $1}' | grep -qx "$1"; }

teardown() {
    local ns i
    for ((i = 0; i < MAXN; i++)); do
        ns="$NSP$i"
        ns_exists "$ns" || continue
        # Whatever still runs in the namespace (a rank, an iperf3 server)
        # would keep it alive after `ip netns del`.
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$ns"
    done
    if ns_exists "$BRNS"; then
        ip netns pids "$BRNS" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$BRNS"
    fi
}

if ((CLEAN_ONLY)); then teardown; exit 0; fi

for tool in ip tc iperf3 timeout unshare python3; do
    command -v "$tool" >/dev/null || die "needs $tool (apt-get install iproute2 iperf3 coreutils util-linux python3)"
done
if has hoop; then [[ -x "$BUILD/ring_bench" ]] || die "no $BUILD/ring_bench: run make first"; fi
if has gloo || has ompi; then
    [[ -n "$ANCHORS" ]] || die "gloo and ompi need -a ANCHORS (the baseline harness, built)"
    has gloo && { [[ -x "$ANCHORS/build/gloo_bench" ]] || die "no $ANCHORS/build/gloo_bench"; }
    has ompi && { [[ -x "$ANCHORS/build/mpi_bench_ompi" ]] || die "no $ANCHORS/build/mpi_bench_ompi"; }
fi

on_signal() { trap - EXIT; log "interrupted: removing the namespaces"; teardown; exit 130; }
if ((KEEP)); then trap 'log "namespaces kept (bench/netns.sh -c removes them)"' EXIT
else trap teardown EXIT; fi
trap on_signal INT TERM HUP

# TBF burst: 1 ms of bytes at RATE, and at least 64 KiB so that one GSO
# super-packet fits; 5 ms of queue.
rate_bits() {
    local v="${1,,}" num unit
    num="${v%%[kmg]*bit}"; num="${num%bit}"
    unit="${v#"$num"}"
    case "$unit" in
    kbit) echo $((num * 1000)) ;; mbit) echo $((num * 1000000)) ;;
    gbit) echo $((num * 1000000000)) ;; bit) echo "$num" ;;
    esac
}

reach() { # reach NS ADDR: a TCP connect from NS to ADDR port 9 is answered
    local err
    err=$(ip netns exec "$1" timeout 1 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1) && return 0
    [[ "$err" == *refused* ]]
}

setup() {
    local i burst t
    teardown
    burst=$(($(rate_bits "$RATE") / 8 / 1000))
    ((burst >= 65536)) || burst=65536
    ip netns add "$BRNS"
    ip -n "$BRNS" link set lo up
    ip -n "$BRNS" link add hnbr type bridge
    ip -n "$BRNS" link set hnbr up
    ip -n "$BRNS" addr add "$NET.254/24" dev hnbr
    for ((i = 0; i < H; i++)); do
        ip netns add "$NSP$i"
        ip -n "$NSP$i" link set lo up
        if [[ -n "$CC" ]]; then
            ip netns exec "$NSP$i" sysctl -qw net.ipv4.tcp_congestion_control="$CC"
        fi
        ip -n "$BRNS" link add "hp$i" type veth peer name "$IFACE" netns "$NSP$i"
        ip -n "$BRNS" link set "hp$i" master hnbr up
        ip -n "$NSP$i" addr add "$NET.$((i + 1))/24" dev "$IFACE"
        ip -n "$NSP$i" link set "$IFACE" up
        tc -n "$NSP$i" qdisc replace dev "$IFACE" root tbf rate "$RATE" burst "$burst" latency 5ms
        tc -n "$BRNS" qdisc replace dev "hp$i" root tbf rate "$RATE" burst "$burst" latency 5ms
    done
    # The bridge ports take a moment to forward: wait until rank 0 reaches
    # every other rank (a refused TCP connect proves the path as well).
    for ((i = 1; i < H; i++)); do
        for t in $(seq 50); do
            reach "${NSP}0" "$NET.$((i + 1))" && break
            ((t < 50)) || die "rank 0 cannot reach $NET.$((i + 1))"
            sleep 0.1
        done
    done
    log "up: $H namespaces ($N ranks, $PER a host$( ((INTERLEAVE)) && echo ', interleaved' || true)), links shaped to $RATE each way (TBF burst $burst B), TCP congestion control $(ip netns exec "${NSP}0" cat /proc/sys/net/ipv4/tcp_congestion_control)"
}

# Bytes the rank-side qdiscs have sent, summed over ranks.
shaped_bytes() {
    local i b tot=0
    for ((i = 0; i < H; i++)); do
        b=$(tc -s -n "$NSP$i" qdisc show dev "$IFACE" | awk '/Sent/ {print $2; exit}')
        tot=$((tot + ${b:-0}))
    done
    echo "$tot"
}

# CPU time of every CPU, busy and all (jiffies), from /proc/stat.
cpu_jiffies() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }

# measure FILE cmd...: cmd's stdout to FILE (its stderr to FILE.err, kept
# when not empty) with the shaped bytes and the machine's busy CPU share
# appended; a failed command leaves FILE.failed instead.
measure() {
    local f="$1" b0 rc=0 c0 c1
    shift
    b0=$(shaped_bytes)
    c0=$(cpu_jiffies)
    "$@" >"$f.tmp" 2>"$f.err" || rc=$?
    c1=$(cpu_jiffies)
    echo "# shaped_link_bytes $(($(shaped_bytes) - b0))" >>"$f.tmp"
    echo "$c0 $c1" | awk '{printf "# cpu_busy_percent %.0f\n", 100 * ($3 - $1) / ($4 - $2)}' >>"$f.tmp"
    [[ -s "$f.err" ]] || rm -f "$f.err"
    if ((rc == 0)); then
        mv "$f.tmp" "$f"
    else
        mv "$f.tmp" "$f.failed"
        log "FAILED (exit $rc): $f.failed, $f.err"
    fi
}

gbps() { # iperf3 -J on stdin: the receiver's goodput in Gbit/s
    python3 -c 'import json,sys; print("%.4f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))'
}

run_iperf() {
    local i j one ring=""
    ip netns exec "${NSP}1" timeout 20 iperf3 -s -1 -p 5201 -B "$NET.2" >/dev/null 2>&1 &
    sleep 0.5
    one=$(ip netns exec "${NSP}0" timeout 20 iperf3 -c "$NET.2" -p 5201 -t 5 -J | gbps)
    wait
    for ((i = 0; i < H; i++)); do
        j=$(((i + 1) % H))
        ip netns exec "$NSP$j" timeout 20 iperf3 -s -1 -p $((5300 + i)) -B "$NET.$((j + 1))" \
            >/dev/null 2>&1 &
    done
    sleep 0.5
    local tmp
    tmp=$(mktemp -d)
    for ((i = 0; i < H; i++)); do
        j=$(((i + 1) % H))
        ip netns exec "$NSP$i" timeout 20 iperf3 -c "$NET.$((j + 1))" -p $((5300 + i)) -t 5 -J \
            >"$tmp/$i.json" &
    done
    wait
    for ((i = 0; i < H; i++)); do ring+="$(gbps <"$tmp/$i.json") "; done
    rm -rf "$tmp"
    echo "iperf3_one_link_Gbps $one"
    echo "iperf3_ring_links_Gbps $ring"
}

run_hoop() {
    local i pids=() rc=0 token port=29500
    token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    for ((i = 0; i < N; i++)); do
        # Each rank gets its host's name too (a UTS namespace), as ranks on
        # separate machines have: the library tells neighbours on its own
        # host from others by it. Rank 0 prints the table; the others only
        # their errors.
        local h
        h=$(host_of "$i")
        ip netns exec "$NSP$h" unshare --uts env HOOP_RANK=$i HOOP_SIZE="$N" \
            HOOP_ROOT="$NET.1:$port" HOOP_TOKEN="$token" NODE="$NSP$h" \
            sh -c 'hostname "$NODE" && exec timeout 900 "$0" "$@"' \
            "$BUILD/ring_bench" "${BENCH_ARGS[@]}" \
            >"$([[ $i == 0 ]] && echo /dev/stdout || echo /dev/null)" &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || rc=$?; done
    return $rc
}

# The baseline harness's arguments for the same sizes as ring_bench's -b/-e
# (its loop picks its own iteration count: 5 at least, about 0.5 s per size).
anchor_args() {
    local b=16M e=256M a prev=""
    for a in "${BENCH_ARGS[@]}"; do
        [[ "$prev" == -b ]] && b="$a"
        [[ "$prev" == -e ]] && e="$a"
        prev="$a"
    done
    echo --minbytes "$b" --maxbytes "$e" --step 4 --target 0.5 --miniters 5 --warmup 0.1 --maxop 20
}

run_gloo() {
    # shellcheck disable=SC2046
    "$ANCHORS/gloo_launch.sh" "$N" "$NSP" "$OUT/logs/gloo" -- --iface "$IFACE" \
        --algo ring_chunked $(anchor_args)
}

run_ompi() {
    # mpirun runs in the bridge namespace, where every rank reaches its
    # PMIx server; the harness's netns_wrap.sh moves rank r into $NSP$r.
    # shellcheck disable=SC2046
    ip netns exec "$BRNS" env PMIX_MCA_ptl_tcp_remote_connections=1 \
        PMIX_MCA_ptl_tcp_if_include=hnbr ANCHOR_NS_PREFIX="$NSP" \
        timeout 900 mpirun.openmpi --allow-run-as-root --oversubscribe -np "$N" \
        --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$IFACE" \
        -x ANCHOR_NS_PREFIX "$ANCHORS/netns_wrap.sh" \
        "$ANCHORS/build/mpi_bench_ompi" --label ompi_tcp $(anchor_args)
}

# Every system runs with glibc told not to mmap nor trim, as the baseline
# harness runs them all (page faults are dear in a VM).
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=17179869184

mkdir -p "$OUT"
setup
tc -n "${NSP}0" qdisc show dev "$IFACE" >"$OUT/qdisc.txt"
{
    echo "# bench/netns.sh -n $N -R $RATE${CC:+ -C $CC} -- ${BENCH_ARGS[*]}"
    echo "# TCP congestion control in the namespaces: $(ip netns exec "${NSP}0" cat /proc/sys/net/ipv4/tcp_congestion_control)"
    echo "# $(uname -srm), $(nproc) cpus, $(date -u +%FT%TZ)"
    git -C "$HERE" log -1 --format='# hoop %h %s' 2>/dev/null || true
} >"$OUT/README.txt"
for rep in $REPS; do
    for sys in iperf hoop gloo ompi; do
        has "$sys" || continue
        log "N=$N $RATE rep $rep: $sys"
        measure "$OUT/${sys}_r$rep.txt" "run_$sys"
    done
done
python3 "$HERE/bench/summarize.py" "$OUT"

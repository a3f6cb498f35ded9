#!/usr/bin/env python3
"""summarize.py - medians of raw benchmark outputs, as Markdown tables.

    bench/summarize.py [--us] [--in-place] [--spread] DIR [DIR ...]

A DIR holds the raw outputs of one configuration (one rank count, one
topology), as bench/netns.sh and bench/compare_loopback.sh write them:
    hoop_r<k>.txt    ring_bench (rank 0's table)
    hoopreg_r<k>.txt ring_bench -R (buffers from hoop_mem_alloc)
    gloo_r<k>.txt    the baseline harness's Gloo ring_chunked bench
    ompi_r<k>.txt    the baseline harness's OpenMPI bench (TCP BTL)
    tgloo_r<k>.txt   bench/torch_gloo_bench.py (torch.distributed's gloo)
    hostwide_r<k>.txt  bench/hostwide_bench.c (one segment for every rank
                     of the host: a design's ceiling, bench/manycore.sh)
    iperf_r<k>.txt   iperf3 goodput of one link (shaped links only)
For every size, each system's busbw is the median over repeats, with
[min-max]; hoop's figure is its out-of-place column and, after a slash, its
in-place one (the other systems run in place). The ratios are of medians:
hoop out-of-place against one link's iperf3 goodput, against each link's
when all ring links carry iperf3 at once (the ring loads them all, both
ways), and against Gloo and OpenMPI.

With --in-place the ratios take hoop's in-place figure (the other systems
run in place). With --spread every cell adds the spread of its repeats,
the slowest over the fastest (x1.00: none).

With --us the tables give the time per call (us) instead, and hoop's time
over each other system's.

A DIR may also be inside an archive: the campaigns are kept as
bench/results/<campaign>.tar.xz, each unpacking into its folder
(tar -C bench/results -xf bench/results/netns.tar.xz), and a DIR such as
bench/results/netns/2gbit_N4 that is not on disk is read from
bench/results/netns.tar.xz; bench/results/netns.tar.xz:2gbit_N4 names it
explicitly.

bench/plot.py reads the same files through load().
"""
import fnmatch
import glob
import os
import re
import statistics
import sys
import tarfile

SYSTEMS = ("hoop", "hoopreg", "gloo", "ompi", "tgloo", "hostwide")
LABELS = {"hoop": "hoop", "hoopreg": "hoop -R", "gloo": "Gloo ring_chunked",
          "ompi": "OpenMPI tcp", "tgloo": "torch gloo", "hostwide": "one-segment prototype"}
# ring_bench's tables (out of place and in place).
HOOPS = ("hoop", "hoopreg")
# Set by main(): the ratios from hoop's in-place column; cells with spread.
OPTS = {"in_place": False, "spread": False}


_ARCHIVES = {}


def _archive(path):
    """{member name: text} of a .tar.xz, read once."""
    if path not in _ARCHIVES:
        with tarfile.open(path, "r:xz") as t:
            _ARCHIVES[path] = {m.name.removeprefix("./"): t.extractfile(m).read().decode()
                               for m in t.getmembers() if m.isfile()}
    return _ARCHIVES[path]


def _in_archive(d):
    """(archive, member folder) holding DIR d, or None when d is on disk
    (or in no archive). The archive of bench/results/<x> is
    bench/results/<x>.tar.xz, whose members are named <x>/..."""
    if ".tar.xz:" in d:
        arch, sub = d.split(".tar.xz:", 1)
        camp = os.path.basename(arch)
        return arch + ".tar.xz", "/".join(p for p in (camp, sub.strip("/")) if p)
    if os.path.isdir(d):
        return None
    parts = os.path.normpath(d).split(os.sep)
    for i in range(len(parts), 0, -1):
        arch = os.sep.join(parts[:i]) + ".tar.xz"
        if os.path.isfile(arch):
            return arch, "/".join(parts[i - 1:])
    return None


def files(d, pattern):
    """Sorted names of the files of DIR d that match pattern (a glob of a
    file name), on disk or in its archive."""
    where = _in_archive(d)
    if where is None:
        return sorted(glob.glob(os.path.join(d, pattern)))
    arch, sub = where
    return sorted(f"{arch}:{name}" for name in _archive(arch)
                  if os.path.dirname(name) == sub
                  and fnmatch.fnmatch(os.path.basename(name), pattern))


def lines(path):
    """The lines of a file that files() named."""
    if ".tar.xz:" in path and not os.path.isfile(path):
        arch, name = path.split(".tar.xz:", 1)
        return _archive(arch + ".tar.xz")[name].splitlines(keepends=True)
    with open(path) as f:
        return f.readlines()


def parse_hoop(path):
    """{size: (busbw out of place, busbw in place, us out of place, us in
    place)} from a ring_bench
    allreduce table, worked out from the time column (busbw is printed with
    two decimals only, too coarse for a link of 0.25 GB/s); a result with
    wrong elements makes the whole file an error."""
    return parse_hoop_sweep(path).get(None, {})


def parse_hoop_sweep(path):
    """{sweep value or None: {size: (oop, ip)}}: ring_bench --sweep prints a
    table per value, each after a '# sweep VAR=VALUE' line."""
    out = {}
    rows = out.setdefault(None, {})
    nranks = None
    for line in lines(path):
        m = re.match(r"# nranks (\d+)", line)
        if m:
            nranks = int(m.group(1))
        m = re.match(r"# sweep (HOOP_\w+)=(\S+)", line)
        if m:
            out.pop(None, None)
            rows = out.setdefault(f"{m.group(1)}={m.group(2)}", {})
        p = line.split()
        if not p or not p[0].isdigit() or len(p) < 13:
            continue
        if p[8] != "0" or p[12] != "0":
            raise ValueError(f"{path}: wrong results at {p[0]} bytes")
        if nranks is None:
            raise ValueError(f"{path}: no '# nranks' line before the table")
        size, factor = int(p[0]), 2 * (nranks - 1) / nranks
        rows[size] = tuple(size / (float(t) * 1e3) * factor for t in (p[5], p[9])) + (
            float(p[5]), float(p[9]))
    return out


def sweep_table(d):
    """Medians per swept value and size over the hoop_r*.txt of d, or None
    when they hold no sweep."""
    per = {}
    for f in files(d, "hoop_r*.txt"):
        for val, rows in parse_hoop_sweep(f).items():
            if val is None:
                return None
            for size, v in rows.items():
                per.setdefault((val, size), []).append(v)
    if not per:
        return None
    vals = list(dict.fromkeys(v for v, _ in per))
    sizes = sorted({s for _, s in per})
    lines = [f"{d}:", "", "| value | " + " | ".join(size_str(s) + " (out / in place)"
                                                    for s in sizes) + " |",
             "|---|" + "---|" * len(sizes)]
    for val in vals:
        row = [val]
        for size in sizes:
            got = per.get((val, size), [])
            row.append(f"{cell([g[0] for g in got])} / {cell([g[1] for g in got])}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def parse_table(path, us_col, good):
    """{size: (busbw, busbw, us, us)} from a table whose rows start with the
    size and give the time (us) in column us_col, busbw in column 6 and, in
    column 7, `good` when every result was right (any other word makes the
    whole file an error)."""
    rows = {}
    for line in lines(path):
        p = line.split()
        if not p or not p[0].isdigit() or len(p) < 8:
            continue
        if p[7] != good:
            raise ValueError(f"{path}: check failed at {p[0]} bytes")
        rows[int(p[0])] = (float(p[6]), float(p[6]), float(p[us_col]), float(p[us_col]))
    return rows


def parse_anchor(path):
    """The baseline harness's table."""
    return parse_table(path, 3, "ok")


def parse_hostwide(path):
    """hostwide_bench's table (out of place; its last column counts the
    wrong elements)."""
    return parse_table(path, 4, "0")


def parse_iperf(path):
    """One link's iperf3 goodput in GB/s (1e9 bytes/s)."""
    for line in lines(path):
        m = re.match(r"iperf3_one_link_Gbps\s+([0-9.]+)", line)
        if m:
            return float(m.group(1)) / 8
    return None


def parse_iperf_ring(path):
    """Each ring link's iperf3 goodput in GB/s, all links loaded at once."""
    for line in lines(path):
        if line.startswith("iperf3_ring_links_Gbps"):
            return [float(x) / 8 for x in line.split()[1:]]
    return []


def load(d):
    """{"hoop"|"gloo"|"ompi": {size: [(oop, ip) per repeat]}, "iperf": [GB/s]}"""
    out = {"iperf": [], "iperf_ring": []}
    for sysname in SYSTEMS:
        parse = {"hoop": parse_hoop, "hoopreg": parse_hoop,
                 "hostwide": parse_hostwide}.get(sysname, parse_anchor)
        per = {}
        for f in files(d, f"{sysname}_r*.txt"):
            for size, v in parse(f).items():
                per.setdefault(size, []).append(v)
        out[sysname] = per
    for f in files(d, "iperf_r*.txt"):
        g = parse_iperf(f)
        if g is not None:
            out["iperf"].append(g)
        out["iperf_ring"] += parse_iperf_ring(f)
    return out


def med(vals):
    return statistics.median(vals) if vals else None


def cell(vals):
    if not vals:
        return "-"
    out = f"{med(vals):.3f} [{min(vals):.3f}-{max(vals):.3f}]"
    if OPTS["spread"] and min(vals) > 0:
        out += f" x{max(vals) / min(vals):.2f}"
    return out


def size_str(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def table(d, us=False):
    sweep = sweep_table(d)
    if sweep:
        return sweep
    data = load(d)
    if us:
        return time_table(d, data)
    lines = [f"{d}:", ""]
    iperf = med(data["iperf"])
    if iperf:
        lines += [f"iperf3 goodput of one link: {cell(data['iperf'])} GB/s "
                  f"({len(data['iperf'])} runs); of each ring link with all loaded at once: "
                  f"{cell(data['iperf_ring'])} GB/s", ""]
    present = [s for s in SYSTEMS if data[s]]
    head = ["size"]
    for s in present:
        head.append(LABELS[s] + (" (out / in place)" if s in HOOPS else ""))
    ring = med(data["iperf_ring"])
    ip = " (in place)" if OPTS["in_place"] else ""
    if "hoop" in present:
        if iperf:
            head.append("hoop / iperf3")
        if ring:
            head.append("hoop / iperf3 all links")
        head += [f"hoop{ip} / {LABELS[s]}" for s in present if s != "hoop"]
    if "hoopreg" in present:
        head += [f"hoop -R{ip} / {LABELS[s]}" for s in present if s not in HOOPS]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    sizes = sorted(set().union(*[set(data[s]) for s in present])) if present else []
    for size in sizes:
        row = [size_str(size)]
        m = {}
        for s in present:
            vals = data[s].get(size, [])
            oop = [v[0] for v in vals]
            m[s] = med([v[1] for v in vals] if OPTS["in_place"] else oop)
            if s in HOOPS:
                row.append(f"{cell(oop)} / {cell([v[1] for v in vals])}")
            else:
                row.append(cell(oop))
        if "hoop" in present:
            h = m["hoop"]
            if iperf:
                row.append(f"{h / iperf:.3f}" if h else "-")
            if ring:
                row.append(f"{h / ring:.3f}" if h else "-")
            for s in present:
                if s != "hoop":
                    row.append(f"{h / m[s]:.2f}" if h and m[s] else "-")
        if "hoopreg" in present:
            h = m["hoopreg"]
            for s in present:
                if s not in HOOPS:
                    row.append(f"{h / m[s]:.2f}" if h and m[s] else "-")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def time_table(d, data):
    """Time per call (us) instead of busbw, and hoop's time over the
    others' (at most 1: hoop is as fast or faster)."""
    present = [s for s in SYSTEMS if data[s]]
    head = ["size"] + [LABELS[s] + (" (out / in place)" if s == "hoop" else "")
                       for s in present]
    others = [s for s in present if s != "hoop"]
    if "hoop" in present:
        head += [f"hoop / {LABELS[s]}" for s in others]
    lines = [f"{d}: time per call (us)", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    sizes = sorted(set().union(*[set(data[s]) for s in present])) if present else []
    for size in sizes:
        row, m = [size_str(size)], {}
        for s in present:
            vals = data[s].get(size, [])
            t = [v[2] for v in vals]
            m[s] = med([v[3] for v in vals] if OPTS["in_place"] else t)
            cellt = (f"{med(t):.1f} [{min(t):.1f}-{max(t):.1f}]" if t else "-")
            if s == "hoop":
                ti = [v[3] for v in vals]
                cellt += f" / {med(ti):.1f}" if ti else ""
            row.append(cellt)
        if "hoop" in present:
            for s in others:
                row.append(f"{m['hoop'] / m[s]:.2f}" if m["hoop"] and m[s] else "-")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv):
    flags = ("--us", "--in-place", "--spread")
    args = [a for a in argv[1:] if a not in flags]
    OPTS["in_place"] = "--in-place" in argv
    OPTS["spread"] = "--spread" in argv
    if not args:
        sys.stderr.write(__doc__)
        return 2
    print("\n\n".join(table(d, us="--us" in argv) for d in args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

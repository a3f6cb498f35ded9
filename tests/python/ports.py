"""Ports for the jobs the tests start. A port the kernel hands out for
bind(0) lies in the ephemeral range, where any test running beside this one
may take it for an outgoing connection before the job listens on it. These
come from below that range, and a run of them is free together (torchrun
puts hoop's root on its master port + 1)."""
import random
import socket


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count=1):
    """The first of `count` consecutive TCP ports on 127.0.0.1 that are
    free now and lie below the ephemeral range."""
    top = min(_ephemeral_low(), 65536) - count
    low = 20000 if top - 20000 >= 1000 else 1024  # as hooprun draws
    for _ in range(200):
        first = random.randrange(low, top)
        held = []
        try:
            for port in range(first, first + count):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError("no %d free consecutive ports below %d on 127.0.0.1" % (count, top + count))

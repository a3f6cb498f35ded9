"""Horovod's runtime variables as hoop's: horovodrun turns its options
(--fusion-threshold-mb, --cycle-time-ms, --timeline-filename, --autotune,
...) into HOROVOD_* variables, and scripts set them themselves. Where the
hoop variable of the same meaning is unset, the Horovod one gives it its
value; a HOOP_* variable that is set wins. Those hoop has no equivalent
for (NCCL streams, MPI threads, ...) are left alone."""
import os

# HOROVOD_X -> HOOP_Y, the value as it is (the same unit and meaning).
_SAME = (
    ("HOROVOD_FUSION_THRESHOLD", "HOOP_FUSION_THRESHOLD"),        # bytes
    ("HOROVOD_CYCLE_TIME", "HOOP_CYCLE_TIME"),                    # milliseconds
    ("HOROVOD_CACHE_CAPACITY", "HOOP_CACHE_CAPACITY"),
    ("HOROVOD_TIMELINE_MARK_CYCLES", "HOOP_TIMELINE_MARK_CYCLES"),
    ("HOROVOD_STALL_CHECK_TIME_SECONDS", "HOOP_STALL_CHECK_TIME"),
    ("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "HOOP_STALL_SHUTDOWN_TIME"),
    ("HOROVOD_AUTOTUNE", "HOOP_AUTOTUNE"),
    ("HOROVOD_AUTOTUNE_LOG", "HOOP_AUTOTUNE_LOG"),
    ("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "HOOP_AUTOTUNE_STEPS_PER_SAMPLE"),
    ("HOROVOD_HIERARCHICAL_ALLREDUCE", "HOOP_HIERARCHICAL"),
)

_LOG_LEVELS = {"trace": "debug", "debug": "debug", "info": "info", "warning": "warn",
               "error": "error", "fatal": "error"}


def _translate(environ):
    """(hoop name, value, 'HOROVOD_X=value') for each HOROVOD_* variable of
    environ that gives a hoop one."""
    out = [(hp, environ[hv], "%s=%s" % (hv, environ[hv])) for hv, hp in _SAME
           if environ.get(hv, "") != ""]
    tl = environ.get("HOROVOD_TIMELINE", "")
    if tl and tl != "DYNAMIC":  # DYNAMIC: started later by start_timeline()
        out.append(("HOOP_TIMELINE", tl, "HOROVOD_TIMELINE=" + tl))
    off = environ.get("HOROVOD_STALL_CHECK_DISABLE", "")
    if off not in ("", "0"):
        out.append(("HOOP_STALL_CHECK_TIME", "0", "HOROVOD_STALL_CHECK_DISABLE=" + off))
    lvl = environ.get("HOROVOD_LOG_LEVEL", "")
    if lvl:
        out.append(("HOOP_LOG_LEVEL", _LOG_LEVELS.get(lvl.lower(), lvl),
                    "HOROVOD_LOG_LEVEL=" + lvl))
    iface = environ.get("HOROVOD_GLOO_IFACE", "")
    if iface:
        out.append(("HOOP_SOCKET_IFNAME", "=" + iface, "HOROVOD_GLOO_IFACE=" + iface))
    return out


def apply(environ=None):
    """Set the hoop variables the Horovod ones give, where unset. Returns
    {hoop name: 'HOROVOD_X=value'} for those it set (for sentences)."""
    environ = os.environ if environ is None else environ
    taken = {}
    for hoop_name, value, origin in _translate(environ):
        if hoop_name in environ or hoop_name in taken:
            continue
        environ[hoop_name] = value
        taken[hoop_name] = origin
    return taken


def explain(message, taken):
    """message, with where each hoop variable it names came from."""
    notes = ["%s came from %s" % (k, v) for k, v in taken.items() if k in message]
    return "%s (%s)" % (message, "; ".join(notes)) if notes else message

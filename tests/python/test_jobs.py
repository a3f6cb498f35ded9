"""Jobs started from here (one pytest process): a rank killed mid-training,
hooprun running the examples. Run: python3 -m pytest tests/python/test_jobs.py"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ports import free_ports

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("HOOP_BUILD_DIR", os.path.join(SRC, "build"))
PY = sys.executable

TRAIN_AND_DIE = r"""
import os, signal, sys, time, torch
import hoop.torch as hvd
hvd.init()
m = torch.nn.Linear(8, 8)
opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.01), named_parameters=m.named_parameters())
try:
    for step in range(100000):
        if step == 5 and hvd.rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        m(torch.ones(2, 8)).sum().backward()
        opt.step()
        if step == 4:
            print("STEP4", time.time(), flush=True)
except hvd.HoopError as e:
    print("CAUGHT %s %.3f %s" % (type(e).__name__, time.time(), e), flush=True)
    sys.exit(3)
"""


def env_for(rank, size, port):
    env = dict(os.environ)
    env.update(HOOP_RANK=str(rank), HOOP_SIZE=str(size), HOOP_ROOT="127.0.0.1:%d" % port,
               HOOP_TOKEN="python-test", PYTHONPATH=os.path.join(SRC, "python"), HOOP_TIMEOUT="60")
    return env


def test_a_rank_killed_mid_training_is_named_on_the_others():
    size, port = 3, free_ports()
    procs = [subprocess.Popen([PY, "-c", TRAIN_AND_DIE], env=env_for(r, size, port), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(size)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=120)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a rank hung after rank 1 was killed")
    assert procs[1].returncode == -signal.SIGKILL
    for r in (0, 2):
        out = outs[r]
        assert procs[r].returncode == 3, "rank %d: %s" % (r, out)
        caught = [line for line in out.splitlines() if line.startswith("CAUGHT")]
        assert caught, "rank %d raised nothing: %s" % (r, out)
        assert "rank 1" in caught[0], "rank %d's error does not name rank 1: %s" % (r, caught[0])
        t_step = float([line for line in out.splitlines() if line.startswith("STEP4")][0].split()[1])
        t_err = float(caught[0].split()[2])
        assert t_err - t_step < 15, "rank %d took %.1f s to report rank 1's death" % (r, t_err - t_step)


@pytest.mark.parametrize("script,expect", [("torch_train.py", "epoch 4: loss"),
                                           ("torch_synthetic_benchmark.py", "Total img/sec on 2 rank(s)")])
def test_hooprun_runs_the_examples(script, expect):
    args = [os.path.join(BUILD, "hooprun"), "-np", "2", PY, os.path.join(SRC, "examples", script)]
    if script.startswith("torch_synthetic"):
        args += ["--num-iters", "1", "--num-batches-per-iter", "2", "--batch-size", "8"]
    t0 = time.time()
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
    assert expect in r.stdout, r.stdout
    assert time.time() - t0 < 300


def test_library_is_found_from_hoop_library():
    lib = os.path.join(BUILD, "libhoop.so")
    env = dict(os.environ, HOOP_LIBRARY=lib, PYTHONPATH=os.path.join(SRC, "python"))
    r = subprocess.run([PY, "-c", "import hoop; print(hoop.library_path())"], env=env, stdout=subprocess.PIPE,
                       text=True, timeout=60)
    assert r.stdout.strip() == os.path.realpath(lib)
    env["HOOP_LIBRARY"] = "/nonexistent/libhoop.so"
    r = subprocess.run([PY, "-c", "import hoop; hoop.library_path()"], env=env, stderr=subprocess.PIPE,
                       text=True, timeout=60)
    assert r.returncode != 0 and "HOOP_LIBRARY" in r.stderr


@pytest.mark.skipif(not os.path.exists("/usr/bin/torchrun"), reason="torchrun is not installed here")
def test_torchrun_runs_the_training_example():
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOP_") or k == "HOOP_LIBRARY"}
    # hoop's root takes MASTER_PORT + 1. Debian 12's torchrun cannot parse
    # its own default for --redirects and --tee, hence 1 (stdout, shown).
    port = free_ports(2)
    r = subprocess.run(["/usr/bin/torchrun", "--nproc_per_node", "2", "--redirects", "1", "--tee", "1",
                        "--monitor_interval", "0.2", "--master_addr", "127.0.0.1", "--master_port", str(port),
                        "--no_python", PY,
                        os.path.join(SRC, "examples", "torch_train.py")], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
    assert "epoch 4: loss" in r.stdout, r.stdout


PLACES = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x04000000) != 0:  # CLONE_NEWUTS
    print("NO_UTS errno %d" % ctypes.get_errno(), flush=True)
    sys.exit(77)
name = sys.argv[1].encode()
libc.sethostname(name, len(name))
import hoop.torch as hvd
hvd.init()
print("PLACES", hvd.rank(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size(),
      hvd.is_homogeneous(), flush=True)
hvd.shutdown()
"""


def test_places_follow_the_hosts_when_ranks_are_interleaved():
    """Two emulated hosts (a UTS namespace each), the ranks given
    alternately as srun's cyclic distribution does: Horovod's cross rank is
    the place among the ranks of one local rank, not rank // local_size."""
    size, port = 4, free_ports()
    hosts = ["hoop-py-host-a", "hoop-py-host-b", "hoop-py-host-a", "hoop-py-host-b"]
    procs = [subprocess.Popen([PY, "-c", PLACES, hosts[r]], env=env_for(r, size, port), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(size)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    if any(p.returncode == 77 for p in procs):
        for p in procs:
            p.kill()
        pytest.skip("no UTS namespace here (it needs CAP_SYS_ADMIN): %s" % outs)
    want = {0: "0 2 0 2 True", 1: "0 2 1 2 True", 2: "1 2 0 2 True", 3: "1 2 1 2 True"}
    for r, out in enumerate(outs):
        assert procs[r].returncode == 0, "rank %d: %s" % (r, out)
        line = [x for x in out.splitlines() if x.startswith("PLACES")]
        assert line and line[0] == "PLACES %d %s" % (r, want[r]), "rank %d: %s" % (r, out)


@pytest.mark.parametrize("extra", [[], ["--fp16-allreduce", "--gradient-predivide-factor", "2"]])
def test_a_horovod_script_runs_with_only_its_import_changed(tmp_path, extra):
    """horovod_style_train.py is written for horovod.torch; the one line
    `import horovod.torch as hvd` becomes `import hoop.torch as hvd`, and
    nothing else changes."""
    text = open(os.path.join(HERE, "horovod_style_train.py")).read()
    assert text.count("import horovod.torch as hvd\n") == 1 and "hoop" not in text.split('"""')[2]
    script = tmp_path / "train.py"
    script.write_text(text.replace("import horovod.torch as hvd\n", "import hoop.torch as hvd\n"))
    env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"))
    r = subprocess.run([os.path.join(BUILD, "hooprun"), "-np", "2", PY, str(script)] + extra, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
    assert "on 2 worker(s)" in r.stdout, r.stdout
    final = [line for line in r.stdout.splitlines() if "final accuracy" in line]
    assert final and float(final[0].split()[-1]) > 0.8, r.stdout  # four classes: chance is 0.25


HOROVOD_SETTINGS = r"""
import json, os, sys, torch
import hoop, hoop.torch as hvd
hvd.init()
s = hoop.engine_stats()
print("ENV", os.environ.get("HOOP_FUSION_THRESHOLD"), os.environ.get("HOOP_CYCLE_TIME"),
      os.environ.get("HOOP_STALL_CHECK_TIME"), flush=True)
print("STATS", s["fusion_threshold"], s["cycle_time_ms"], flush=True)
for i in range(4):
    hvd.allreduce(torch.ones(5), name="hv.%d" % (i % 2))
"""


def test_horovods_variables_set_hoops(tmp_path):
    """What horovodrun --fusion-threshold-mb 1 --cycle-time-ms 7
    --timeline-filename PATH --no-stall-check sets reaches the engine; a
    HOOP_* variable that is set wins (rank 1's fusion threshold)."""
    size, port, timeline = 2, free_ports(), str(tmp_path / "tl.json")
    envs = []
    for r in range(size):
        env = env_for(r, size, port)
        env.update(HOROVOD_FUSION_THRESHOLD="1048576", HOROVOD_CYCLE_TIME="7", HOROVOD_TIMELINE=timeline,
                   HOROVOD_STALL_CHECK_DISABLE="1")
        for k in ("HOOP_FUSION_THRESHOLD", "HOOP_CYCLE_TIME", "HOOP_TIMELINE", "HOOP_STALL_CHECK_TIME"):
            env.pop(k, None)
        if r == 1:
            env["HOOP_FUSION_THRESHOLD"] = "2097152"
        envs.append(env)
    procs = [subprocess.Popen([PY, "-c", HOROVOD_SETTINGS], env=envs[r], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(size)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for r in range(size):
        assert procs[r].returncode == 0, "rank %d: %s" % (r, outs[r])
    # The engine runs with rank 0's threshold and cycle time (rank 1's own
    # threshold shows in its stats only until the first cycle).
    assert "ENV 1048576 7 0" in outs[0] and "STATS 1048576 7.0" in outs[0], outs[0]
    assert "ENV 2097152 7 0" in outs[1] and "7.0\n" in outs[1], outs[1]
    with open(timeline) as f:
        names = {e.get("args", {}).get("name") for e in json.load(f)}
    assert {"hv.0", "hv.1"} <= names, names


def test_a_bad_horovod_variable_is_named(tmp_path):
    env = env_for(0, 1, free_ports())
    env.pop("HOOP_CACHE_CAPACITY", None)
    env["HOROVOD_CACHE_CAPACITY"] = "lots"
    r = subprocess.run([PY, "-c", "import hoop.torch as hvd\ntry:\n    hvd.init()\nexcept hvd.HoopInvalidError as e:\n"
                        "    print('CAUGHT', e)\n"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=60)
    assert "CAUGHT" in r.stdout and "HOROVOD_CACHE_CAPACITY=lots" in r.stdout, r.stdout

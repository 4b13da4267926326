"""The execution harness: isolation, crash verdicts, the private channel, leftover processes."""
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from kernelmill.validate.harness import run_in_worker, worker_env

SOURCE = "kernelmill.validate.harness:run_source"


def run(source: str, timeout_s: float = 20, **kwargs):
    return run_in_worker(SOURCE, {"source": source}, timeout_s=timeout_s, device="cpu", **kwargs)


def test_echo_runs_in_fresh_empty_folder_with_interpreter():
    result = run_in_worker("kernelmill.validate.harness:echo", {"a": [1, 2]}, timeout_s=30,
                           device="cpu")
    assert result.ok, result.error
    assert result.value["a"] == [1, 2]
    assert result.value["pid"] != os.getpid()
    assert result.value["interpret"] == "1"
    assert os.path.basename(result.value["cwd"]) == "cwd"
    assert not os.path.exists(result.value["cwd"])  # removed afterwards
    # the worker's own marks before its hello (its main, its confinement), then its stages and
    # its result's sending, all by the host's clock as seconds since the run began
    assert [s for s, _ in result.stages] == ["worker main", "confine", "import target",
                                             "run target", "echo", "send"]
    times = [at for _, at in result.stages]
    assert times == sorted(times) and 0 <= times[0] and times[-1] <= result.wall_s


@pytest.fixture(scope="module")
def warm_zygote():
    """One run first: the CPU zygote started (3-5 s on a loaded 2-core host, counted in the
    first run's time limit), so a 3 s limit below is the run's own."""
    result = run("def main():\n    return {}")
    assert result.ok, result.error


@pytest.mark.usefixtures("warm_zygote")
@pytest.mark.parametrize("body, stage, message", [
    ("import os\ndef main():\n    os._exit(3)", "run target", "exited with status 3"),
    ("import ctypes\ndef main():\n    ctypes.string_at(0)", "run target", "SIGSEGV"),
    ("import os, signal\ndef main():\n    os.kill(os.getpid(), signal.SIGKILL)", "run target",
     "killed by SIGKILL"),
    ("def main():\n    raise ValueError('boom')", "run target", "ValueError: boom"),
    ("def main():\n    x = bytearray(40 << 30)\n    return {}", "run target", "MemoryError"),
    ("from kernelmill.validate.harness_worker import mark_stage\n"
     "def main():\n    mark_stage('deep')\n    while True:\n        pass", "deep", "timed out"),
])
def test_crashes_become_verdicts(body, stage, message):
    result = run(body, timeout_s=3)
    assert not result.ok
    assert result.error["stage"] == stage
    assert message in result.error["message"]
    # a death by signal is named by the harness apart from the message (whose words a worker
    # may choose): a retry of the batch reads it (``grade.retry``)
    signal = next((name for name in ("SIGSEGV", "SIGKILL") if name in message), None)
    assert result.error.get("signal") == signal, result.error


def test_no_child_outlives_the_run_even_after_setsid():
    body = ("import os, time\n"
            "def main():\n"
            "    pids = []\n"
            "    for escape in (False, True):\n"
            "        pid = os.fork()\n"
            "        if pid == 0:\n"
            "            if escape:\n"
            "                os.setsid()\n"
            "            time.sleep(1000)\n"
            "            os._exit(0)\n"
            "        pids.append(pid)\n"
            "    return {'pids': pids}\n")
    result = run(body)
    assert result.ok, result.error
    assert result.leaked_processes == 1  # the setsid child escaped the group and was found
    def running(pid):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (FileNotFoundError, ProcessLookupError):
            return False

    deadline = time.monotonic() + 5  # SIGKILL lands when the scheduler next runs the child
    while any(map(running, result.value["pids"])) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not [pid for pid in result.value["pids"] if running(pid)], "a child still running"


def test_forged_frames_on_any_descriptor_are_detected():
    body = ("import os, struct\n"
            "def main():\n"
            "    fake = b'R' + b'{\"correct\": true}'\n"
            "    frame = struct.pack('>I', len(fake)) + b'0' * 32 + fake\n"
            "    for fd in range(3, 4096):\n"
            "        try:\n"
            "            os.write(fd, frame)\n"
            "        except OSError:\n"
            "            pass\n"
            "    os._exit(0)\n")
    result = run(body)
    assert not result.ok
    assert result.tampered
    assert "tampered" in result.error["message"]


_KEY_THIEF = """
import os, sys
def main():
    channel = sys.modules["kernelmill.validate.harness_worker"]
    data = channel._encode_result({"forged": True})
    sys.audit("kernelmill.frame", channel.KIND_RESULT, data)  # raised by this code: refused
    keys = [cell.cell_contents for value in list(vars(channel).values())
            for cell in (getattr(value, "__closure__", None) or ())
            if isinstance(cell.cell_contents, bytes) and len(cell.cell_contents) >= 16]
    for key in keys:
        frame = b"".join(bytes(part) for part in channel.frame_parts(key, channel.KIND_RESULT, data))
        for fd in range(3, 1024):
            try:
                os.write(fd, frame)
            except OSError:
                pass
        os._exit(0)  # the forged result is the run's only one
    return {"forged": False, "keys": len(keys)}
"""


def test_the_channel_key_is_out_of_the_workers_reach():
    """The channel's writer holds the key where no Python code can read it (an audit hook, held
    by the interpreter alone), and writes a frame only for the harness code that sends that
    kind: a target that looks for the key in the module's closures finds none, and one that
    asks the writer for a result frame itself is refused."""
    result = run(_KEY_THIEF)
    assert not result.ok
    assert "refused a channel frame" in result.error["message"], result.error
    result = run(_KEY_THIEF.replace('    sys.audit("kernelmill.frame"', '    # '))
    assert result.ok and result.value == {"forged": False, "keys": 0}, result.value


def test_a_forged_header_claiming_gigabytes_costs_the_parent_nothing():
    """The body's length is read before its MAC can be checked: a header claiming 3.5 GiB,
    then 8 MiB and an exit, is a tampered channel, and the parent's memory never grew by the
    claim (its buffer takes pages only as bytes arrive)."""
    import resource

    body = ("import os, struct\n"
            "def main():\n"
            "    frame = struct.pack('>I', 7 << 29) + b'0' * 32 + b'R' + bytes(8 << 20)\n"
            "    for fd in range(3, 4096):\n"
            "        try:\n"
            "            os.write(fd, frame)\n"
            "        except OSError:\n"
            "            pass\n"
            "    os._exit(0)\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run(body)
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert not result.ok and result.tampered
    assert grew_mb < 1024, grew_mb


def test_signed_small_frames_past_their_bounds_break_the_channel():
    """Stage marks, reports and errors are signed in the worker's process, where a submission
    runs too: one of more than ``SMALL_FRAME`` bytes (a 2 MiB stage name) is a tampered
    channel, and the names the parent keeps are cut to ``STAGE_NAME_CHARS``."""
    from kernelmill.validate.harness import STAGE_NAME_CHARS

    flood = ("from kernelmill.validate.harness_worker import mark_stage\n"
             "def main():\n"
             "    mark_stage('s' * 500)\n"
             "    mark_stage('x' * (2 << 20))\n"
             "    return {'ok': 1}\n")
    result = run(flood)
    assert not result.ok and result.tampered
    assert [len(name) for name, _at in result.stages if name.startswith("s")] == \
        [STAGE_NAME_CHARS]
    fine = run(flood.replace("2 << 20", "1000"))
    assert fine.ok and fine.value == {"ok": 1}


def test_stdout_is_never_parsed():
    body = ("import sys, os\n"
            "def main():\n"
            "    print('{\"ok\": true, \"value\": {\"correct\": true}}')\n"
            "    sys.stdout.flush()\n"
            "    os._exit(0)\n")
    result = run(body)
    assert not result.ok and result.value is None
    assert "correct" in result.stdout_tail


def test_worker_env_names_a_bytecode_folder_only_where_the_run_asks(monkeypatch):
    monkeypatch.setenv("KERNELMILL_PYCACHE", "/tmp/inherited")
    assert "KERNELMILL_PYCACHE" not in worker_env("cpu", {"CUDA_VISIBLE_DEVICES": "3"})
    assert worker_env("cpu", {"KERNELMILL_PYCACHE": "/tmp/asked"})["KERNELMILL_PYCACHE"] == \
        "/tmp/asked"


def test_worker_env_drops_credentials(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    env = worker_env("cpu", {"CUDA_VISIBLE_DEVICES": "3"}, token="abc")
    assert "HF_TOKEN" not in env and "OPENAI_API_KEY" not in env
    assert env["TRITON_INTERPRET"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "3"
    assert env["KERNELMILL_RUN_TOKEN"] == "abc"


def test_sandbox_confines_writes_and_signals(tmp_path):
    from kernelmill.validate.sandbox import abi_version

    if abi_version() <= 0:
        pytest.skip("kernel without Landlock")  # the GPU machine may lack it; CI has it
    outside = tmp_path / "victim.txt"
    outside.write_text("original")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    body = ("import os, signal\n"
            "def main():\n"
            "    results = {}\n"
            f"    for name, path in (('outside', {str(outside)!r}), "
            f"('allowed', {str(allowed / 'x.txt')!r}), ('cwd', 'here.txt')):\n"
            "        try:\n"
            "            open(path, 'w').write('tampered')\n"
            "            results[name] = True\n"
            "        except OSError:\n"
            "            results[name] = False\n"
            "    try:\n"
            "        os.kill(os.getppid(), 0)\n"
            "        results['signal_parent'] = True\n"
            "    except OSError:\n"
            "        results['signal_parent'] = False\n"
            "    return results\n")
    result = run(body, writable=[str(allowed)])
    assert result.ok, result.error
    assert result.sandbox and result.sandbox >= 1
    assert result.value["outside"] is False and outside.read_text() == "original"
    assert result.value["allowed"] is True and result.value["cwd"] is True
    if result.sandbox >= 6:
        assert result.value["signal_parent"] is False


def test_a_confined_worker_cannot_open_the_files_other_processes_lock(tmp_path, monkeypatch):
    """The GPUs' lock files, the host's and the GPUs' memory ledgers, other runs' folders and
    validation's shared folders (its compile caches, its locks) are out of a confined worker's
    reach (``flock`` needs only a descriptor: a worker that held a
    GPU's lock shared would keep every timing window on it waiting), while what lies beside
    them stays readable; a run whose payload names the GPU's lock (a trusted reference or
    validation run) may open that."""
    from kernelmill.validate.gpus import gpu_lock_path
    from kernelmill.validate.host_admission import HostLedger
    from kernelmill.validate.sandbox import abi_version

    if abi_version() <= 0:
        pytest.skip("kernel without Landlock")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELMILL_HOST_LEDGER", str(tmp_path / "ledger"))
    monkeypatch.setenv("KERNELMILL_GPU_LEDGER", str(tmp_path / "gpu-ledgers"))
    (tmp_path / "gpu-ledgers" / "gpu0").mkdir(parents=True)
    (tmp_path / "gpu-ledgers" / "gpu0" / "1-a.held").write_text("0")
    lock = gpu_lock_path("cuda:0", {"CUDA_VISIBLE_DEVICES": "0"})
    ledger = HostLedger(tmp_path / "ledger")
    ledger.set(1 << 20)
    held = sorted(str(p) for p in (tmp_path / "ledger").iterdir())
    beside = tmp_path / "beside.txt"
    beside.write_text("readable")
    # another run's temporary folder, as a run beside this one leaves a file in it
    from kernelmill.validate.harness import runs_folder

    other = Path(tempfile.mkdtemp(prefix="run-", dir=runs_folder()))
    (other / "left.txt").write_text("another run's")
    # validation's shared cache (its workers' compiled Inductor kernels), as it leaves a file
    from kernelmill.validate.worker_budgets import _shared_folder

    cache = Path(tempfile.mkdtemp(prefix="probe-", dir=_shared_folder("cache")))
    (cache / "kernel.py").write_text("a problem's compiled kernel")
    paths = [lock + ".main", lock + ".windows", *held, str(other / "left.txt"),
             str(tmp_path / "gpu-ledgers" / "gpu0" / "1-a.held"), str(cache / "kernel.py"),
             str(beside)]
    assert len(held) == 1 and os.path.isdir(tmp_path / "kernelmill")
    body = ("import fcntl\n"
            "def main():\n"
            "    seen = {}\n"
            f"    for path in {paths!r}:\n"
            "        try:\n"
            "            with open(path, 'rb') as f:\n"
            "                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)\n"
            "            seen[path] = 'opened'\n"
            "        except OSError as exc:\n"
            "            seen[path] = type(exc).__name__\n"
            "    return seen\n")
    try:
        plain = run(body)
        taking = run_in_worker(SOURCE, {"source": body, "lock": lock}, timeout_s=20,
                               device="cpu")
        # a validation worker: its shared folders are its own to write
        validating = run(body, writable=[_shared_folder("cache")])
    finally:
        ledger.close()
        shutil.rmtree(other)
        shutil.rmtree(cache)
    assert plain.ok and taking.ok and validating.ok, (plain.error, taking.error, validating.error)
    assert plain.value == {**{p: "PermissionError" for p in paths[:-1]}, str(beside): "opened"}
    assert taking.value == {**plain.value, lock + ".main": "opened", lock + ".windows": "opened"}
    assert validating.value == {**plain.value, str(cache / "kernel.py"): "opened"}


def test_hidden_folders_rules_grant_nothing_beneath_them_through_links(tmp_path):
    """The read rules around a hidden folder: its ancestors listed only, its siblings granted,
    nothing on it or beneath it, and a link back up the tree (``ln -s / /tmp/x``) neither loops
    nor grants the tree whole."""
    from kernelmill.validate import sandbox

    hidden = tmp_path / "hidden"
    (hidden / "inner").mkdir(parents=True)
    (tmp_path / "beside").mkdir()
    (tmp_path / "to_root").symlink_to("/")
    (tmp_path / "to_here").symlink_to(tmp_path)
    (tmp_path / "into_hidden").symlink_to(hidden / "inner")
    rules = sandbox._read_rules((str(hidden),))
    real = str(hidden.resolve())
    for path, access in rules:
        target = os.path.realpath(path)
        assert not (target == real or target.startswith(real + os.sep)), path
        if real.startswith(target.rstrip(os.sep) + os.sep):  # on the way: listed only
            assert access == sandbox.READ_DIR, (path, access)
    assert (str(tmp_path / "beside"), sandbox.READ) in rules


def test_sandbox_hides_the_workers_own_memory_from_its_file_system(tmp_path):
    """A worker reads its own ``maps``, ``status`` and thread list, but not its memory through
    ``/proc/self/mem``, by any path (a red-team answer read inputs it had not been shown from
    its own memory; what ``map_files`` reaches is kept out of memory until due instead)."""
    from kernelmill.validate.sandbox import abi_version

    if abi_version() <= 0:
        pytest.skip("kernel without Landlock")
    body = ("import os\n"
            "def main():\n"
            "    results = {}\n"
            "    span = open('/proc/self/maps').readline().split()[0]\n"
            "    start = int(span.split('-')[0], 16)\n"
            "    def attempt(name, fn):\n"
            "        try:\n"
            "            fn()\n"
            "            results[name] = True\n"
            "        except OSError:\n"
            "            results[name] = False\n"
            "    def mem(path):\n"
            "        with open(path, 'rb') as handle:\n"
            "            handle.seek(start)\n"
            "            handle.read(16)\n"
            "    attempt('maps', lambda: open('/proc/self/maps').read())\n"
            "    attempt('status', lambda: open('/proc/self/status').read())\n"
            "    attempt('tasks', lambda: os.listdir('/proc/self/task'))\n"
            "    attempt('mem', lambda: mem('/proc/self/mem'))\n"
            "    attempt('mem_by_pid', lambda: mem(f'/proc/{os.getpid()}/mem'))\n"
            "    attempt('mem_by_root', lambda: mem('/proc/self/root/proc/self/mem'))\n"
            "    attempt('mem_of_thread', lambda: mem('/proc/thread-self/mem'))\n"
            "    return results\n")
    result = run(body)
    assert result.ok, result.error
    readable = {k for k, v in result.value.items() if v}
    assert readable == {"maps", "status", "tasks"}, result.value


def test_worker_dies_with_a_killed_grader(tmp_path):
    import signal
    import subprocess
    import sys

    pid_file = tmp_path / "worker.pid"
    body = ("import os, time\n"
            "def main():\n"
            f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
            "    time.sleep(1000)\n")
    grader = subprocess.Popen([sys.executable, "-c",
                               "from kernelmill.validate.harness import run_in_worker\n"
                               f"run_in_worker({SOURCE!r}, {{'source': {body!r}}}, timeout_s=600, "
                               f"device='cpu', writable=[{str(tmp_path)!r}])"])
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and grader.poll() is None, "worker never started"
        time.sleep(0.1)
    worker = int(pid_file.read_text())
    grader.send_signal(signal.SIGKILL)
    grader.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{worker}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    break
        except (FileNotFoundError, ProcessLookupError):  # gone between open and read
            break
        time.sleep(0.1)
    else:
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the worker outlived its killed grader")


def test_warm_workers_outlive_the_thread_that_started_their_zygote():
    """Grading threads come and go; the zygote one of them started must keep serving its runs
    after that thread ends (a parent-death signal tied to the thread once killed them all)."""
    import threading

    from kernelmill.validate.zygote import ZYGOTES

    ZYGOTES.close()
    first, release = [], threading.Event()

    def starter():
        first.append(run_in_worker("kernelmill.validate.harness:echo", {}, timeout_s=120,
                                   device="cpu"))
        release.wait(60)

    thread = threading.Thread(target=starter)
    thread.start()
    while not first:
        time.sleep(0.05)
    assert first[0].ok and first[0].warm
    slow = "import time\ndef main():\n    time.sleep(2)\n    return {'slept': True}\n"
    results = []
    runner = threading.Thread(target=lambda: results.append(run_in_worker(
        "kernelmill.validate.harness:run_source", {"source": slow}, timeout_s=60,
        device="cpu")))
    runner.start()
    time.sleep(0.5)
    release.set()  # the thread that started the zygote ends while the run is under way
    thread.join()
    runner.join()
    assert results[0].ok and results[0].warm and results[0].value == {"slept": True}, \
        results[0].error


def test_a_warm_worker_writes_temporary_files_in_its_own_folder():
    """What the zygote's imports cached from its own environment (the temporary folder) is
    forgotten: a child's ``tempfile`` follows its ``TMPDIR``, the one folder it may write."""
    source = ("import os, tempfile\ndef main():\n    fd, path = tempfile.mkstemp()\n"
              "    os.close(fd)\n    return {'path': path, 'tmp': os.environ['TMPDIR']}\n")
    result = run_in_worker("kernelmill.validate.harness:run_source", {"source": source},
                           timeout_s=60, device="cpu", warm=True)
    assert result.ok and result.warm, result.error
    assert result.value["path"].startswith(result.value["tmp"] + os.sep)


def test_a_result_its_load_refuses_fails_in_one_line_that_names_what_it_held():
    """A run whose result holds an object a ``weights_only`` load refuses (a NumPy array, as a
    problem's ``get_inputs`` may return) fails with one line naming the global, not torch's
    ten-line advice to load untrusted files."""
    source = ("import numpy\ndef main():\n    return {'inputs': [numpy.ones(3)]}\n")
    result = run_in_worker("kernelmill.validate.harness:run_source", {"source": source},
                           timeout_s=60, device="cpu")
    message = (result.error or {}).get("message") or ""
    assert not result.ok and "\n" not in message, result.error
    assert message.startswith("result not decodable: it holds numpy.") and \
        "_reconstruct" in message, message


def test_a_warm_worker_collects_without_copying_what_the_zygote_preloaded():
    """The zygote freezes what its preloads made before it forks: a child's full collection
    leaves the inherited objects' headers, and so their pages, alone (unfrozen, a child with
    torch and triton preloaded copied about 20,000 pages in one collection)."""
    source = ("import gc, resource\ndef main():\n"
              "    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
              "    gc.collect()\n"
              "    after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
              "    return {'frozen': gc.get_freeze_count(), 'faults': after - before}\n")
    result = run_in_worker("kernelmill.validate.harness:run_source", {"source": source},
                           timeout_s=60, device="cpu", warm=True)
    assert result.ok and result.warm, result.error
    assert result.value["frozen"] > 100_000, result.value  # torch's objects among them
    assert result.value["faults"] < 2_000, result.value


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_warm_worker_compiles_with_its_own_runs_inductor_threads(threads):
    """The zygote imports torch._dynamo and Inductor (seconds each worker used to pay), whose
    config reads the environment at import: a child recomputes what its run's env says."""
    source = ("import sys\ndef main():\n    import torch._inductor.config as c\n"
              "    return {'threads': c.compile_threads,\n"
              "            'preloaded': 'torch._dynamo' in sys.modules}\n")
    result = run_in_worker("kernelmill.validate.harness:run_source", {"source": source},
                           timeout_s=120, device="cpu", warm=True,
                           env={"TORCHINDUCTOR_COMPILE_THREADS": threads})
    assert result.ok and result.warm, result.error
    assert result.value == {"threads": int(threads), "preloaded": True}


def test_a_preload_that_starts_a_thread_is_dropped_not_the_zygote(tmp_path, monkeypatch):
    """A process is forked safely only with one thread. An optional preload that starts one
    (a GPU driver's import can) costs that preload, not every warm worker, nor the preloads
    after it."""
    from kernelmill.validate.zygote import BASE_PRELOAD, ZygotePool

    (tmp_path / "starts_a_thread.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n")
    names = (*BASE_PRELOAD, "kernelmill.validate.harness_worker", "starts_a_thread",
             "kernelmill.validate.sandbox")
    monkeypatch.setenv("KERNELMILL_WARM_PRELOAD", ",".join(names))
    pool = ZygotePool()
    try:
        env = worker_env("cpu", {"PYTHONPATH": f"{tmp_path}{os.pathsep}"
                                 f"{os.environ.get('PYTHONPATH', '')}"})
        zygote = pool.get("cpu", env)
        assert zygote is not None and zygote.alive, zygote and zygote.failed
        assert zygote.info["threads"] == 1
        # that one alone: the preloads after it are kept
        assert zygote.info["preloaded"] == [n for n in names if n != "starts_a_thread"]
    finally:
        pool.close()


def test_zygote_kinds_start_apart_and_ahead(monkeypatch):
    """A kind whose zygote is still starting (its imports: 13-14 s on a GPU image without
    bytecode) keeps no other kind waiting, and ``prestart`` starts every kind asked at once,
    each once: a validation's CPU estimates and GPU probes find theirs started together."""
    import threading

    from kernelmill.validate.zygote import ZygotePool

    release, started = threading.Event(), []

    class Started:
        failed, warned, info = None, False, {"threads": 1}
        alive = True

    def start(python, env, names):
        kind = env["KERNELMILL_ZYGOTE_KIND"]
        started.append(kind)
        if kind == "cuda":
            assert release.wait(10)  # the GPU kind's imports, held until the CPU one served
        return Started()

    pool = ZygotePool()
    monkeypatch.setattr(pool, "_start", start)
    threads = pool.prestart({"cuda:0": {}, "cpu": {}})
    try:
        assert pool.get("cpu", {}) is not None  # served while the GPU kind still starts
        assert threads[0].is_alive()
    finally:
        release.set()
        for thread in threads:
            thread.join(10)
    assert pool.get("cuda:1", {}) is not None and pool.get("cpu", {}) is not None
    assert sorted(started) == ["cpu", "cuda"]  # each kind started once


def test_zygote_preloads_ask_no_driver_whether_cuda_is_there(tmp_path, monkeypatch):
    """``torch.utils.cpp_extension`` asks ``torch.cuda.is_available()`` at import; asked of the
    driver, that initialises CUDA (driver threads: on a GPU host the zygote then forked no
    worker). The zygote's preloads get the answer from the device files instead."""
    import torch
    from kernelmill.validate import zygote, zygote_worker

    asked = []
    (tmp_path / "asks_cuda_at_import.py").write_text(
        "import torch\nANSWER = torch.cuda.is_available()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", lambda: asked.append(1) or 1,
                        raising=False)
    probe = torch.cuda.is_available
    module = zygote_worker._import_without_cuda("asks_cuda_at_import")
    assert asked == [] and module.ANSWER == os.path.exists("/dev/nvidiactl")
    assert torch.cuda.is_available is probe  # put back
    assert "torch.utils.cpp_extension" in zygote.preload()


def test_time_a_worker_waited_for_the_gpu_is_added_to_its_limit():
    """A grade waiting for another grade's lock (a slow import holding the GPU shared) is not
    timed out for it: the parent adds the wait to the worker's limit (``Control.extend``)."""
    import threading

    from kernelmill.validate.harness import Control

    body = "import time\ndef main():\n    time.sleep(7)\n    return {'slept': 7}"
    control = Control()
    threading.Timer(1.0, control.extend, args=(6.0,)).start()  # the parent waited 6 s
    extended = run(body, timeout_s=6, control=control)
    assert extended.ok and extended.value == {"slept": 7}, extended.error
    limited = run(body, timeout_s=6, control=Control())
    assert not limited.ok and "timed out after 6s" in limited.error["message"]


def test_what_a_worker_waited_for_the_gpu_moves_its_limit_on_only_so_far():
    """Credit for waits is bounded (``WAIT_CREDIT_CAP`` times the limit): a member whose own
    window can never take the GPU alone (its code holds the GPU's lock) still ends."""
    from kernelmill.validate.harness import WAIT_CREDIT_CAP, Control

    control = Control()
    control.extend(1000.0)  # its window waits, and waits
    began = time.monotonic()
    result = run("import time\ndef main():\n    time.sleep(60)\n", timeout_s=2,
                 control=control)
    took = time.monotonic() - began
    assert not result.ok and result.error.get("timed_out"), result.error
    assert 2 * (1 + WAIT_CREDIT_CAP) - 0.5 < took < 2 * (1 + WAIT_CREDIT_CAP) + 10, took
    assert f"plus {2 * WAIT_CREDIT_CAP:.0f}s waiting for the GPU" in result.error["message"]


def test_large_results_cross_whole_and_shared_tensors_cross_once():
    """A result of 200 MB arrives bit for bit (it is written from ``torch.save``'s buffer, read
    into one buffer, never joined); a tensor listed twice crosses once and arrives shared."""
    source = ("import torch\n"
              "def main():\n"
              "    big = torch.arange(50 << 20, dtype=torch.int32)\n"
              "    return {'outputs': [big, big, big[:3].clone()]}\n")
    result = run(source, timeout_s=120)
    assert result.ok, result.error
    first, again, small = result.value["outputs"]
    assert first.numel() == 50 << 20 and int(first[-1]) == (50 << 20) - 1
    assert first.untyped_storage().data_ptr() == again.untyped_storage().data_ptr()
    assert small.tolist() == [0, 1, 2]


def test_large_payload_tensors_are_mapped_from_a_sealed_file_not_pickled():
    """A job's large tensors reach the worker mapped from a sealed memory file (pickling 640 MB
    took 3.5 s under the grader's interpreter lock and 2 s to unpickle): bit for bit, one
    object listed twice arrives as one tensor, dtypes the pickle would keep (bfloat16) and
    strides of a tensor that is not contiguous (it is pickled) are kept, and the worker's
    writes stay its own (copy on write). Nobody can write the file once it is sealed."""
    import fcntl

    import torch
    from kernelmill.validate.harness import _tensor_file

    big = torch.arange(1 << 22, dtype=torch.float32)
    payload = {"big": big, "again": [big], "bf": torch.linspace(-2, 2, 1 << 16).bfloat16(),
               "transposed": torch.arange(600 * 400, dtype=torch.float32).view(600, 400).t(),
               "small": torch.arange(5)}
    source = ("import torch\n"
              "def main(payload):\n"
              "    big = payload['big']\n"
              "    maps = open('/proc/self/maps').read()\n"
              "    same = payload['again'][0] is big\n"
              "    big.add_(1)\n"
              "    return {'same': same, 'mapped': 'kernelmill-payload' in maps,\n"
              "            'sum': float(big.double().sum()), 'bf': payload['bf'],\n"
              "            'stride': list(payload['transposed'].stride()),\n"
              "            'transposed': payload['transposed'].contiguous(),\n"
              "            'small': payload['small'].tolist()}\n")
    result = run_in_worker(
        SOURCE, {"source": source, **payload}, timeout_s=60, device="cpu")
    assert result.ok, result.error
    got = result.value
    assert got["mapped"] and got["same"]
    assert got["sum"] == float(big.double().sum()) + big.numel()  # the worker's +1 on its copy
    assert int(big[0]) == 0  # ... never reached the parent's tensor
    assert got["bf"].dtype == torch.bfloat16 and torch.equal(got["bf"], payload["bf"])
    assert got["stride"] == [1, 400] and torch.equal(got["transposed"], payload["transposed"])
    assert got["small"] == [0, 1, 2, 3, 4]

    moved, fd = _tensor_file({"x": big})
    try:
        assert type(moved["x"]).__name__ == "TensorSlot"
        assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"\xff" * 4, 0)
    finally:
        os.close(fd)


def test_decoding_a_large_result_maps_it_and_lets_the_graders_other_threads_run():
    """A result's tensors are mapped from the file its frame was read into, not copied: a copy
    holds the interpreter lock (320 MB: a second in which no other thread of the grader ran, so
    its clock read a group member's back-to-back loop 2-3.6x slow on an H100). Mapped tensors
    are the result's bits and stay writable (copy on write)."""
    import io
    import threading
    import time

    import torch
    from kernelmill.validate.harness import _decode, _FrameFile

    value = {"outputs": [torch.arange(1 << 24, dtype=torch.float32) for _ in range(5)]}
    buffer = io.BytesIO()
    torch.save(value, buffer)
    frame = _FrameFile(len(buffer.getbuffer()))
    frame.map[:] = buffer.getbuffer()
    stalls, stop = [], threading.Event()

    def other_thread():
        while not stop.is_set():
            began = time.monotonic()
            time.sleep(0.001)
            stalls.append(time.monotonic() - began)

    watcher = threading.Thread(target=other_thread)
    watcher.start()
    time.sleep(0.05)
    stalls.clear()
    try:
        decoded = _decode(frame)
    finally:
        stop.set()
        watcher.join()
    assert all(torch.equal(a, b) for a, b in zip(decoded["outputs"], value["outputs"]))
    assert frame.fd is None  # the file is closed; the mapping lives on in the tensors
    # copied, the other thread waited about a second at once (0.5 s: a loaded CI machine)
    assert max(stalls) < 0.5, max(stalls)
    decoded["outputs"][0].add_(1)
    assert torch.equal(decoded["outputs"][0], value["outputs"][0] + 1)
    assert torch.equal(decoded["outputs"][1], value["outputs"][1])


def test_a_worker_ships_bit_identical_outputs_once():
    """``_Run.ship``: an output equal bit for bit to one already shipped (same dtype, shape and
    strides) is that same host tensor; any other is its own."""
    import torch
    from kernelmill.grade.worker.call import _Run

    run_ = _Run.__new__(_Run)
    run_._shipped = {}
    a = run_.ship(torch.arange(12.0).reshape(3, 4))
    assert run_.ship(torch.arange(12.0).reshape(3, 4)) is a
    assert run_.ship(torch.arange(12.0).reshape(4, 3)) is not a  # same bytes, other shape
    assert run_.ship(torch.arange(12.0).reshape(3, 4).half()) is not a
    changed = torch.arange(12.0).reshape(3, 4)
    changed[2, 3] = -0.0
    assert run_.ship(changed) is not a
    assert run_.ship(torch.zeros(3)) is not run_.ship(-torch.zeros(3))  # bits, not values


def test_a_load_fills_every_placement_from_the_first_and_keeps_their_storage(monkeypatch):
    """``_Run.load``: the first placement from the trial's values, every other from the first
    (same values, each in its own storage, the pointers kept); a tensor of another shape is a
    new one of its own at every placement; a non-tensor is put in as it is."""
    import torch
    from kernelmill.grade.worker.call import _Run

    run_ = _Run.__new__(_Run)
    run_.device = "cpu"
    run_.placements = [[torch.zeros(4), torch.zeros(2), 0] for _ in range(3)]
    pointers = [[p[0].data_ptr(), p[1].data_ptr()] for p in run_.placements]
    run_.load([torch.arange(4.0), torch.ones(3), 7])
    for place, buffers in enumerate(run_.placements):
        assert torch.equal(buffers[0], torch.arange(4.0)) and buffers[0].data_ptr() == \
            pointers[place][0]
        assert torch.equal(buffers[1], torch.ones(3)) and buffers[2] == 7
    storages = {b[1].untyped_storage().data_ptr() for b in run_.placements}
    assert len(storages) == 3  # reshaped: a copy of its own at each placement
    # for the one-call check, made warm: with "turns" placing the first placement written last
    # (from the others), every placement holding the values, the pointers kept; with "blocks"
    # only the first (the one the one-call graph reads), the others as they were
    from types import SimpleNamespace
    run_.turns = SimpleNamespace(placing="turns")
    written = []
    import kernelmill.grade.worker.call as call_module
    real = call_module._tensor_copy

    def copy(into, value):
        written.append(next(i for i, p in enumerate(run_.placements) if p[0] is into)
                       if any(p[0] is into for p in run_.placements) else None)
        return real(into, value)

    monkeypatch.setattr(call_module, "_tensor_copy", copy)
    run_.load([torch.arange(4.0) + 1, torch.ones(3), 8], single=True)
    assert [w for w in written if w is not None] == [1, 2, 0]
    for place, buffers in enumerate(run_.placements):
        assert torch.equal(buffers[0], torch.arange(4.0) + 1) and buffers[0].data_ptr() == \
            pointers[place][0]
        assert buffers[2] == 8
    run_.turns.placing = "blocks"
    written.clear()
    run_.load([torch.arange(4.0) + 2, torch.ones(3), 9], single=True)
    assert [w for w in written if w is not None] == [0]
    assert torch.equal(run_.placements[0][0], torch.arange(4.0) + 2) and \
        run_.placements[0][2] == 9
    assert all(torch.equal(p[0], torch.arange(4.0) + 1) and p[2] == 8
               for p in run_.placements[1:])


def test_reports_of_a_run_without_a_control_pipe_are_kept_in_order():
    """What a worker reports as it sees it stays with the parent, whatever the run does later
    (the compile worker streams each native text before the build: its own record can be
    emptied by the submission's later code)."""
    body = ("from kernelmill.validate.harness_worker import report\n"
            "def main():\n"
            "    report({'native_text': 0, 'part': 'int main() {'})\n"
            "    report({'native_text': 0, 'part': ' return 0; }'})\n"
            "    return {'native_texts': []}\n")
    result = run(body, timeout_s=30)
    assert result.ok, result.error
    assert result.value == {"native_texts": []}
    assert result.reports == [{"native_text": 0, "part": "int main() {"},
                              {"native_text": 0, "part": " return 0; }"}]
    from kernelmill.grade.grader import streamed_texts
    assert streamed_texts(result.reports) == ["int main() { return 0; }"]


def test_a_warm_worker_reports_the_cpu_time_it_used():
    """The zygote reaps each run with its resource usage: a run that spins 0.4 s of CPU reports
    at least that, and one that sleeps as long reports far less (grading throughput is bound by
    the host's CPUs; this is what each worker costs them)."""
    spin = ("import time\ndef main():\n    end = time.process_time() + 0.4\n"
            "    while time.process_time() < end:\n        pass\n    return {}\n")
    sleep = "import time\ndef main():\n    time.sleep(0.4)\n    return {}\n"
    spun, slept = (run_in_worker(SOURCE, {"source": s}, timeout_s=60, device="cpu", warm=True)
                   for s in (spin, sleep))
    assert spun.ok and spun.warm and slept.ok and slept.warm, (spun.error, slept.error)
    assert spun.cpu_s is not None and spun.cpu_s >= 0.4, spun.cpu_s
    assert slept.cpu_s is not None and slept.cpu_s < spun.cpu_s - 0.25, (slept.cpu_s, spun.cpu_s)


def test_a_result_frame_is_spliced_from_the_pipe_whole_and_read_on_where_splice_cannot():
    """The result's bytes go from the worker's pipe into the frame's memory file in the kernel;
    from something that is not a pipe, nothing is spliced and the reader's ``readv`` does it."""
    import threading

    from kernelmill.validate.harness import _FrameFile, _Reader

    payload = os.urandom(3 << 20) + b"end"
    r, w = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(w, payload[:1 << 20]),
                                              os.write(w, payload[1 << 20:]), os.close(w)))
    writer.start()
    frame = _Reader(r, b"k", 0.0)._read_exact(len(payload), file=True)
    writer.join()
    assert isinstance(frame, _FrameFile) and bytes(frame.map) == payload
    frame.close()
    os.close(r)
    r, w = os.pipe()  # and the splice alone fills it
    writer = threading.Thread(target=lambda: (os.write(w, payload), os.close(w)))
    writer.start()
    holder = _FrameFile(len(payload))
    assert holder.splice_from(r) == len(payload)
    writer.join()
    assert bytes(holder.map) == payload
    holder.close()
    os.close(r)

    with tempfile.TemporaryFile() as plain:  # a regular file: splice refuses it
        plain.write(payload)
        plain.flush()
        plain.seek(0)
        holder = _FrameFile(len(payload))
        assert holder.splice_from(plain.fileno()) == 0
        holder.close()
        fd = os.dup(plain.fileno())
        frame = _Reader(fd, b"k", 0.0)._read_exact(len(payload), file=True)
        os.close(fd)
        assert bytes(frame.map) == payload
        frame.close()


def test_a_result_frames_file_is_held_by_the_run_alone_while_the_worker_lives_on():
    """Once a result frame is read, the reader thread blocks on the next frame holding nothing
    of it: the file goes as soon as the run lets its result go, though the worker (a kept
    reference worker, one that has not yet exited) still holds its end of the pipe."""
    import hashlib
    import hmac
    import time
    import weakref

    from kernelmill.validate.harness import _FrameFile, _Reader
    from kernelmill.validate.harness_worker import HEADER, KIND_RESULT

    body = os.urandom(64 << 10)
    mac = hmac.new(b"k", KIND_RESULT, hashlib.sha256)
    mac.update(body)
    r, w = os.pipe()
    reader = _Reader(r, b"k", 0.0)
    reader.start()
    os.write(w, HEADER.pack(len(body) + 1) + mac.digest() + KIND_RESULT + body)
    deadline = time.monotonic() + 10
    while reader.result is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert isinstance(reader.result, _FrameFile) and bytes(reader.result.map) == body
    gone = weakref.ref(reader.result)
    reader.result = None
    time.sleep(0.05)
    try:
        assert gone() is None and reader.is_alive()
    finally:
        os.close(w)
        reader.join(10)


def test_a_warm_worker_inherits_what_the_zygote_listed_for_the_grader():
    """The grader's worker is a preload whose ``zygote_warm`` runs in the zygote: a run forked
    from it starts with the watched modules already listed."""
    result = run("import sys\n"
                 "def main():\n"
                 "    worker = sys.modules.get('kernelmill.grade.worker.guards.patches')\n"
                 "    return {'listed': len(worker._WARM) if worker else -1}\n", timeout_s=60)
    assert result.ok, result.error
    assert result.warm and result.value["listed"] > 1000, result.value


def test_every_worker_computes_float32_as_ieee_not_tf32():
    """cuDNN defaults to TF32 for convolutions and RNNs: in a worker it is off, as matmul's is,
    so references, the validator's noise floor and candidates all compute fp32 in fp32."""
    import torch

    assert torch.backends.cudnn.allow_tf32  # the library's default, here in the parent
    result = run("import torch\ndef main():\n    return {'cudnn': torch.backends.cudnn."
                 "allow_tf32, 'matmul': torch.backends.cuda.matmul.allow_tf32}")
    assert result.ok, result.error
    assert result.value == {"cudnn": False, "matmul": False}


def test_a_result_too_large_for_one_frame_says_so():
    from kernelmill.validate.harness_worker import MAX_RESULT_BYTES, _too_large

    assert _too_large(MAX_RESULT_BYTES) is None and _too_large(10) is None
    why = _too_large(6 << 30)
    assert why.startswith("the run's result is 6.0 GiB") and "shrink the problem" in why
    # the parent takes a frame up to the header's 4-byte length, kind byte included
    from kernelmill.validate.harness import HEADER, MAX_FRAME
    assert MAX_RESULT_BYTES + 1 < 1 << (8 * HEADER.size) <= MAX_FRAME


def test_spares_forked_ahead_serve_runs_as_fresh_workers(monkeypatch, tmp_path):
    """With spares (``KERNELMILL_SPARES``; on CUDA each has made its context ahead), a run after
    the first of its device setting goes to a child forked before it was asked for: in its own
    folder, with its run's whole environment, holding no socket of the zygote or of another
    spare, and no spare outlives the zygote."""
    import sys

    from kernelmill.validate.zygote import ZYGOTES

    monkeypatch.setenv("KERNELMILL_SPARES", "2")
    ZYGOTES.close()
    source = ("import os, time\ndef main():\n"
              "    fds = []\n"
              "    for n in os.listdir('/proc/self/fd'):\n"
              "        try:\n"
              "            fds.append(os.readlink(f'/proc/self/fd/{n}'))\n"
              "        except OSError:\n"
              "            pass\n"
              "    with open('/proc/self/stat') as f:\n"
              "        started = int(f.read().rsplit(')', 1)[1].split()[19])\n"
              "    return {'pid': os.getpid(), 'cwd': os.getcwd(), 'mark': os.environ.get('MARK'),\n"
              "            'fds': fds,\n"
              "            'sockets': [f for f in fds if f.startswith('socket:')],\n"
              "            'started': started, 'ticks': os.sysconf('SC_CLK_TCK'),\n"
              "            'sid': os.getsid(0) == os.getpid()}\n")
    try:
        runs = []
        for mark in ("a", "b", "c"):
            asked = time.monotonic()
            runs.append((asked, run_in_worker("kernelmill.validate.harness:run_source",
                                              {"source": source}, timeout_s=60, device="cpu",
                                              env={"MARK": mark})))
            time.sleep(0.3)  # the spares are forked after the first run's request
        for (asked, result), mark in zip(runs, "abc"):
            assert result.ok and result.warm, result.error
            value = result.value
            assert value["mark"] == mark and value["sid"], value
            assert value["sockets"] == [], value  # no zygote's or spare's channel
            # nothing of another run either (its pipes, its streams): a fresh fork's count
            assert len(value["fds"]) == len(runs[0][1].value["fds"]), (value, runs[0][1].value)
            assert value["cwd"] != "/" and os.path.basename(value["cwd"]), value
        assert [r.spare for _, r in runs] == [False, True, True]
        with open("/proc/uptime") as handle:  # a spare's process began before its request
            uptime = float(handle.read().split()[0])
        value = runs[2][1].value
        began = value["started"] / value["ticks"]
        assert began < uptime - (time.monotonic() - runs[2][0]) + 0.05, value
        zygote = ZYGOTES._zygotes[(sys.executable, "cpu")]
        guardian = zygote.info["guardian"]
    finally:
        ZYGOTES.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _descendants_of(guardian):
        time.sleep(0.1)
    assert not _descendants_of(guardian)  # the spares went with their zygote


def _descendants_of(pid: int) -> list[int]:
    from kernelmill.validate.zygote_worker import _alive, descendants

    return [p for p in descendants(pid) if p != pid and _alive(p)]


def test_a_fork_request_with_more_descriptors_than_a_request_carries_is_never_half_served(
        tmp_path, monkeypatch):
    """A run with more descriptors than one fork request carries (``MAX_FDS``) starts a fresh
    interpreter rather than a warm worker missing some; a request whose descriptors the kernel
    cut anyway is not forked, and the zygote goes on serving."""
    from kernelmill.validate.harness import worker_env
    from kernelmill.validate.zygote import ZYGOTES
    from kernelmill.validate.zygote_child import MAX_FDS

    log = tmp_path / "zygote.log"
    monkeypatch.setenv("KERNELMILL_ZYGOTE_LOG", str(log))
    ZYGOTES.close()  # a zygote of its own, whose stderr is the log
    try:
        warmed = run_in_worker("kernelmill.validate.harness:echo", {}, timeout_s=120,
                               device="cpu")
        assert warmed.ok and warmed.warm, warmed.error
        zygote = ZYGOTES.get("cpu", worker_env("cpu"))
        assert zygote is not None and zygote.alive
        fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(MAX_FDS + 1)]
        try:
            assert zygote.spawn({}, "/", fds) is None  # not sent: the caller starts a fresh one
            # sent past the guard: the zygote sees its descriptors cut and forks nothing
            assert zygote.request({"op": "fork", "id": 10**6, "env": {}, "cwd": "/"}, fds)
        finally:
            for fd in fds:
                os.close(fd)
        deadline = time.monotonic() + 10
        while "descriptors were cut" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert f"cut at {MAX_FDS}: not forked" in log.read_text()
        again = run_in_worker("kernelmill.validate.harness:echo", {}, timeout_s=120,
                              device="cpu")
        assert again.ok and again.warm and zygote.alive, again.error
    finally:
        ZYGOTES.close()


@pytest.mark.parametrize("named", [True, False])
def test_a_worker_reads_library_bytecode_from_the_folder_its_parent_names_and_writes_none(
        tmp_path, named):
    """Where the parent names a bytecode folder, a module the worker imports is read from the
    bytecode a trusted process left there (here one that says 8 where the source says 7, of the
    same size and time: what the import trusts); nothing is ever written, there or beside the
    module."""
    import importlib.util
    import py_compile
    import sys

    lib, cache = tmp_path / "lib", tmp_path / "pycache"
    lib.mkdir()
    source = lib / "kmlazy.py"
    source.write_text("VALUE = 8\n")
    sys.pycache_prefix, before = str(cache), sys.pycache_prefix
    try:
        compiled = importlib.util.cache_from_source(str(source))
    finally:
        sys.pycache_prefix = before
    py_compile.compile(str(source), cfile=compiled)
    stamp = os.stat(source)
    source.write_text("VALUE = 7\n")
    os.utime(source, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    other = lib / "kmother.py"
    other.write_text("VALUE = 1\n")
    body = ("import sys\n"
            "def main():\n"
            "    import kmlazy, kmother\n"
            "    return {'value': kmlazy.VALUE, 'prefix': sys.pycache_prefix}")
    env = {"PYTHONPATH": str(lib), **({"KERNELMILL_PYCACHE": str(cache)} if named else {})}
    result = run(body, timeout_s=60, env=env, writable=[str(cache)])
    assert result.ok, result.error
    assert result.value == {"value": 8 if named else 7, "prefix": str(cache) if named else None}
    assert not list(cache.rglob("kmother.*.pyc"))  # read only, though the folder is writable
    assert not (lib / "__pycache__").exists()


def test_a_bytecode_folder_is_named_only_where_torch_was_installed_without_bytecode(
        tmp_path, monkeypatch):
    """The folder is named where torch has no bytecode beside it, written by a trusted
    process (the warm-up imports the libraries' modules), of this user's own and writable by no
    other; a folder others may write is refused."""
    import importlib.util
    import stat
    import sys

    from kernelmill.validate import bytecode as B
    from kernelmill.validate import worker_budgets as W

    fake = tmp_path / "torch"
    (fake / "_inductor").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "_inductor" / "compile_fx.py").write_text("")
    spec = importlib.util.spec_from_file_location("torch", fake / "__init__.py")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    monkeypatch.setattr(B.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "kmwarm.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.setenv("PYTHONPATH", str(lib))
    monkeypatch.setattr(B, "WARM_MODULES", ("kmwarm", "no_such_module_here"))
    B.bytecode_missing.cache_clear()
    try:
        assert B.bytecode_missing()
        folder = B.bytecode_folder(wait=True)
        assert folder and W._worker_env({}, "cuda:0")[W.BYTECODE_VAR] == folder
        assert list(Path(folder).rglob("kmwarm.*.pyc"))  # the warm-up's, not a worker's
        assert stat.S_IMODE(os.stat(folder).st_mode) & 0o077 == 0
        os.chmod(os.path.dirname(folder), 0o777)  # a folder others may write: refused
        assert B.bytecode_folder() is None
        os.chmod(os.path.dirname(folder), 0o700)
        cached = fake / "_inductor" / "__pycache__" / f"compile_fx.{sys.implementation.cache_tag}.pyc"
        cached.parent.mkdir()
        cached.write_bytes(b"")
        B.bytecode_missing.cache_clear()
        assert B.bytecode_folder() is None
        assert W.BYTECODE_VAR not in W._worker_env({}, "cuda:0")
    finally:
        B.bytecode_missing.cache_clear()


def test_a_confined_worker_reads_its_main_threads_wait_for_a_core():
    """The sandbox closes ``/proc`` to a confined worker; its main thread's scheduler file is
    opened before, so a timed call on CPU can still be read less its wait for a core."""
    from kernelmill.validate.schedstat import runqueue_wait_ns

    if runqueue_wait_ns() is None:
        pytest.skip("the kernel does not report a thread's runqueue wait")
    result = run("from kernelmill.validate.schedstat import runqueue_wait_ns\n"
                 "def main():\n"
                 "    try:\n"
                 "        open('/proc/thread-self/schedstat').read()\n"
                 "        opens = True\n"
                 "    except OSError:\n"
                 "        opens = False\n"
                 "    return {'wait': runqueue_wait_ns(), 'opens': opens}\n",
                 timeout_s=60)
    assert result.ok, result.error
    assert result.sandbox and not result.value["opens"]  # confined: not opened now
    assert isinstance(result.value["wait"], int) and result.value["wait"] >= 0


_ASIDE_SENDER = """
import sys, time, types
from kernelmill.validate import harness_worker as H

synced = []

def send(data):  # this source's code: not under a trusted root
    sys.audit(H.FRAME_EVENT, H.KIND_REPORT, data)

def main():
    registered = {registered}
    if registered == "before":
        sys.audit(H.ASIDE_SENDER_EVENT, send.__code__, lambda: synced.append(1), time.time_ns)
    H.require_trusted_senders()
    if registered == "after":  # too late: the strict mode is on
        sys.audit(H.ASIDE_SENDER_EVENT, send.__code__, lambda: synced.append(1), time.time_ns)
    code = send.__code__ if registered != "copy" else send.__code__.replace()
    sender = types.FunctionType(code, globals())
    refused = []
    for data in {payloads}:
        try:
            sender(data)
        except RuntimeError as exc:
            refused.append(str(exc))
    spans = []
    sys.audit(H.ASIDE_SPANS_EVENT, spans)
    return {{"refused": refused, "synced": len(synced), "spans": spans}}
"""


@pytest.mark.parametrize("registered", ["before", "after", "copy"])
def test_only_the_registered_aside_sender_reports_aside_with_a_submissions_code_on_the_stack(
        registered):
    """The compile wrapper (``launches._install_compile_aside``) reports ``aside`` and the
    point after it from inside a submission's call, where every other report is refused: the
    one code object registered before the strict mode may send those two reports, exactly and
    in turn, the writer synchronising the device before each and keeping each aside's span by
    the clock it was given. A code object registered after it, an equal copy of the registered
    one, another report from it, or an aside out of turn is refused."""
    from kernelmill.validate.harness import Control
    from kernelmill.validate.harness_worker import ASIDE_REPORTS

    aside, between = ASIDE_REPORTS
    control = Control()
    # an aside, a point, a point out of turn, another report, an aside never closed
    payloads = [aside, between, between, b'{"ready": 1}', aside]
    began = time.time_ns()
    result = run(_ASIDE_SENDER.format(registered=repr(registered), payloads=repr(payloads)),
                 control=control)
    assert result.ok, result.error
    reports = [value for _at, value in control.reports]
    refused = result.value["refused"]
    assert all("refused a" in why for why in refused), refused
    if registered == "before":
        assert reports == [{"aside": 1}, {"between": 1}, {"aside": 1}], reports
        assert len(refused) == 2 and "out of turn" in refused[0], refused
        assert result.value["synced"] == 3  # before each report sent
        (first, second), (third, now) = result.value["spans"]
        assert began <= first <= second <= third <= now <= time.time_ns()  # the open one: now
    else:
        assert reports == [] and len(refused) == 5, (reports, refused)
        assert result.value["synced"] == 0 and result.value["spans"] == []


def test_a_cuda_worker_makes_its_context_only_once_a_window_holding_the_gpu_ends(tmp_path):
    """``run_in_worker(init_lock=...)``: a CUDA worker takes the GPU's lock shared before it
    starts the driver, so no context is made while a timing window holds the GPU alone; its
    wait is the ``cuda init wait`` stage. Without ``init_lock`` it does not wait; and the lock's
    files are not open in the worker once its target runs."""
    import threading

    from kernelmill.validate.gpu_lock import GpuLock

    lock = str(tmp_path / "gpu")
    window = GpuLock(lock).exclusive()
    window.__enter__()
    done: dict = {}
    fds = "import os\ndef main():\n    return {'fds': [os.readlink('/proc/self/fd/' + fd) for fd " \
          "in os.listdir('/proc/self/fd') if os.path.exists('/proc/self/fd/' + fd)]}\n"

    def start(name: str, **kwargs) -> None:
        done[name] = run_in_worker(SOURCE, {"source": fds}, timeout_s=60, device="cuda",
                                   writable=[str(tmp_path)], **kwargs)

    waiting = threading.Thread(target=start, args=("waits",), kwargs={"init_lock": lock})
    try:
        waiting.start()
        start("free")  # no lock asked for: runs through while the window holds the GPU
        time.sleep(1.0)
        assert "waits" not in done
    finally:
        window.__exit__(None, None, None)
    waiting.join(60)
    assert done["waits"].ok and done["free"].ok, (done["waits"].error, done["free"].error)
    names = [stage for stage, _ in done["waits"].stages]
    assert names.index("cuda init wait") < names.index("cuda init") < names.index("confine")
    at = dict(done["waits"].stages)
    assert at["cuda init"] - at["cuda init wait"] >= 0.9  # the rest of the window's hold
    assert "cuda init wait" not in [stage for stage, _ in done["free"].stages]
    assert not [f for f in done["waits"].value["fds"] if f.startswith(lock)]


def test_a_worker_making_its_context_does_not_queue_behind_a_window_still_waiting(tmp_path):
    """A window that waits for the GPU may be waiting for a shared hold of the very grade whose
    worker is making its context (the parent holds shared while it waits for its members to
    end): the worker's init waits for windows that hold the GPU, never for queued ones."""
    import threading

    from kernelmill.validate.gpu_lock import GpuLock

    lock = str(tmp_path / "gpu")
    order: list[str] = []
    grade = GpuLock(lock).shared()
    grade.__enter__()  # the grade's hold, waiting for its member below
    try:
        def window() -> None:
            with GpuLock(lock).exclusive():
                order.append("window")

        queued = threading.Thread(target=window)
        queued.start()
        time.sleep(0.3)  # the window holds the turn and waits for the grade's hold
        result = run_in_worker("kernelmill.validate.harness:echo", {}, timeout_s=60,
                               device="cuda", writable=[str(tmp_path)], init_lock=lock)
        order.append("member")
        assert result.ok, result.error
    finally:
        grade.__exit__(None, None, None)
    queued.join(10)
    assert order == ["member", "window"]


def test_the_init_lock_switch_names_the_gpus_lock_only_where_it_is_on(tmp_path, monkeypatch):
    from kernelmill.core.errors import KernelmillError
    from kernelmill.validate.gpus import gpu_lock_path, init_lock

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELMILL_INIT_LOCK", "off")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    one = {"CUDA_VISIBLE_DEVICES": "1"}
    assert init_lock("cuda:0", one) is None and init_lock("cuda:0", one, validation=True) is None
    monkeypatch.delenv("KERNELMILL_INIT_LOCK")  # by default: a grade's workers, not validation's
    assert init_lock("cuda:0", one) == gpu_lock_path("cuda:0", one) != gpu_lock_path("cuda:0")
    assert init_lock("cuda:0", one, validation=True) is None
    monkeypatch.setenv("KERNELMILL_INIT_LOCK", "on")
    assert init_lock("cuda:0", one, validation=True) == init_lock("cuda:0", one) is not None
    assert init_lock("cpu") is None
    monkeypatch.setenv("KERNELMILL_INIT_LOCK", "yes")
    with pytest.raises(KernelmillError, match="grading, on, off"):
        init_lock("cuda")


def test_validations_workers_ask_for_the_init_lock_as_validations(monkeypatch):
    """Every worker a validation starts asks ``gpus.init_lock`` as one of validation's
    (``validation=True``), which by default keeps them outside the lock a grade's take."""
    from kernelmill.validate import one_problem

    asked = []

    def recorded(device, env=None, validation=False):
        asked.append(validation)

    monkeypatch.setattr(one_problem, "init_lock", recorded)
    source = (Path(__file__).resolve().parents[1] / "fixtures" / "submissions" /
              "ref_scale_add.py").read_text()
    validation = one_problem.validate_source(source, config={"timeout_s": 120})
    assert validation["checks"], validation
    assert asked and all(asked), asked


# the kinds of socket a worker holds (by its descriptors)
SOCKETS = """import os
import socket


def main():
    kinds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            probe = socket.socket(fileno=os.dup(int(name)))
        except OSError:
            continue
        kinds.append("stream" if probe.type == socket.SOCK_STREAM else "other")
        probe.close()
    return {"kinds": kinds}
"""


@pytest.mark.usefixtures("warm_zygote")
def test_a_worker_started_before_its_payload_waits_for_it_off_its_clock():
    # A worker given a ``DeferredPayload`` starts and confines itself, then waits for its
    # payload (here longer than its whole limit: the wait is the parent's), gets its large
    # tensors through their sealed file and its small values through the pickle, and only
    # then runs its target. One withdrawn ends at its wait, neither timed out nor run.
    import threading

    import torch
    from kernelmill.validate.deferred_payload import DeferredPayload
    from kernelmill.validate.harness import Control

    def started(deferred):
        out, control = {}, Control()
        thread = threading.Thread(target=lambda: out.setdefault("run", run_in_worker(
            "kernelmill.validate.harness:echo", deferred, timeout_s=3, device="cpu",
            control=control)))
        thread.start()
        return thread, out

    deferred = DeferredPayload()
    thread, out = started(deferred)
    time.sleep(4)
    assert thread.is_alive()  # past its 3 s: still waiting, not killed
    big = torch.arange(1 << 16, dtype=torch.float32)  # 256 KiB: in the tensor file
    assert deferred.give({"x": big, "n": 3})
    assert not deferred.give({"n": 4}) and not deferred.cancel()  # once
    thread.join(60)
    result = out["run"]
    assert result.ok, result.error
    assert torch.equal(result.value["x"], big) and result.value["n"] == 3
    stages = [s for s, _ in result.stages]
    assert stages[stages.index("payload wait") + 1:stages.index("payload wait") + 3] == \
        ["import target", "run target"], stages
    # it confined itself before its wait; its own start is not credited as the wait
    assert stages.index("confine") < stages.index("payload wait"), stages
    assert deferred.waiting_s(None) == 0.0
    assert 3.5 <= deferred.given_at - deferred.started_at <= result.wall_s

    withdrawn = DeferredPayload()
    thread, out = started(withdrawn)
    time.sleep(0.5)
    assert withdrawn.cancel()
    thread.join(60)
    result = out["run"]
    assert not result.ok and not result.timed_out, result.error
    assert result.error["stage"] == "payload wait", result.error
    assert "withdrawn" in result.error["message"], result.error
    assert "echo" not in [s for s, _ in result.stages]

    # what the target runs holds no end of the socket its payload came over (its late parts'
    # socket, a datagram one, stays: it asks for them over it)
    listing, out, control = DeferredPayload(), {}, Control()
    thread = threading.Thread(target=lambda: out.setdefault("run", run_in_worker(
        SOURCE, listing, timeout_s=20, device="cpu", control=control)))
    thread.start()
    assert listing.give({"source": SOCKETS})
    thread.join(60)
    result = out["run"]
    assert result.ok, result.error
    assert result.value["kinds"] and "stream" not in result.value["kinds"], result.value

    # a payload the grader cannot hand over (here: one that does not pickle) is its own
    # failure, said as one, not the worker's nor a withdrawal
    unsendable = DeferredPayload()
    thread, out = started(unsendable)
    assert unsendable.give({"f": lambda: None})
    thread.join(60)
    result = out["run"]
    assert not result.ok and result.error["stage"] == "spawn", result.error
    assert "could not be handed" in result.error["message"], result.error

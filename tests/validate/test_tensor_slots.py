"""A worker's large result tensors come back in the run's results file (``tensor_slots``): the
result frame carries their slots; the parent seals the file once the worker is gone and maps
it. What shares a storage keeps sharing it; a file still writable, or a slot that does not fit
the file, is a tampered channel, never a crash of the grader."""
import mmap
import os
import socket

import pytest
import torch
from kernelmill.validate.harness import run_in_worker
from kernelmill.validate.late_read import map_part, read_part
from kernelmill.validate.tensor_slots import (
    SlotError,
    TensorSlot,
    attach_slots,
    recv_fds,
    slot_tensors,
)

SOURCE = "kernelmill.validate.harness:run_source"

RESULT = (
    "import torch\n"
    "def main(payload):\n"
    "    g = torch.Generator().manual_seed(7)\n"
    "    big = torch.randn(300, 1000, generator=g)\n"
    "    base = torch.randn(400, 400, generator=g)\n"
    "    return {'big': big, 'again': big, 'bf': big.to(torch.bfloat16),\n"
    "            'base': base, 'view': base[:, :200], 'half': torch.arange(70000).half(),\n"
    "            'small': torch.arange(5), 'n': 3, 'nested': [{'x': big * 2}],\n"
    "            'maps': open('/proc/self/maps').read().count('kernelmill-results')}\n")


def _expected():
    g = torch.Generator().manual_seed(7)
    return torch.randn(300, 1000, generator=g), torch.randn(400, 400, generator=g)


def test_large_result_tensors_come_back_through_the_results_file_as_they_were():
    result = run_in_worker(SOURCE, {"source": RESULT}, timeout_s=60, device="cpu")
    assert result.ok, result.error
    got = result.value
    big, base = _expected()
    assert torch.equal(got["big"], big) and got["again"] is got["big"]  # one object, one slot
    assert got["bf"].dtype == torch.bfloat16 and torch.equal(got["bf"], big.to(torch.bfloat16))
    assert torch.equal(got["nested"][0]["x"], big * 2) and got["half"].dtype == torch.float16
    assert torch.equal(got["half"], torch.arange(70000).half())
    # a view and its base share a storage: they come through torch.save, still sharing it
    assert torch.equal(got["view"], base[:, :200])
    assert got["view"].untyped_storage().data_ptr() == got["base"].untyped_storage().data_ptr()
    assert got["small"].tolist() == [0, 1, 2, 3, 4] and got["n"] == 3
    assert got["maps"] == 0  # written, never mapped, in the worker
    got["big"].add_(1)  # the parent's copy on write: its tensors stay writable


def test_a_results_file_still_writable_elsewhere_is_not_read(tmp_path):
    """The parent seals the file before it maps it: a process that still maps it writable
    (one the run's kill missed) could change what the judge reads, and the seal is refused."""
    fd = os.memfd_create("kernelmill-results", os.MFD_ALLOW_SEALING)
    try:
        value = slot_tensors({"x": torch.ones(1 << 16)}, fd)
        assert type(value["x"]) is TensorSlot
        shared = mmap.mmap(fd, os.fstat(fd).st_size)  # a writer that is still there
        with pytest.raises(SlotError, match="sealed"):
            attach_slots(value, fd)
        shared.close()
        got = attach_slots(value, fd)  # gone: sealed, then read
        assert torch.equal(got["x"], torch.ones(1 << 16))
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"\xff" * 4, 0)
    finally:
        os.close(fd)


def test_one_tensor_found_in_several_places_crosses_in_the_file_once():
    """A worker ships one host copy for every call that gave the same bytes (a deterministic
    forward's repeat, refill and audit calls): that tensor, found in several places of the
    result, is one slot in the results file (its bytes written once, never through the
    frame's pickle and MAC), and the parent maps it as one tensor. A view beside its base
    still stays in the frame."""
    fd = os.memfd_create("kernelmill-results", os.MFD_ALLOW_SEALING)
    try:
        out, base = torch.arange(1 << 16, dtype=torch.float32), torch.ones(1 << 16)
        value = slot_tensors({"calls": [{"outputs": [out]}, {"outputs": [out]}], "again": out,
                              "base": base, "view": base[: 1 << 15]}, fd)
        slots = [value["calls"][0]["outputs"][0], value["calls"][1]["outputs"][0],
                 value["again"]]
        assert all(type(s) is TensorSlot for s in slots) and slots[0] == slots[2]
        assert os.fstat(fd).st_size == out.numel() * 4  # written once
        assert type(value["base"]) is torch.Tensor and type(value["view"]) is torch.Tensor
        got = attach_slots(value, fd)
        first = got["calls"][0]["outputs"][0]
        assert torch.equal(first, out) and got["again"] is first
        assert got["calls"][1]["outputs"][0] is first
    finally:
        os.close(fd)


@pytest.mark.parametrize("slot", [
    (1 << 30, 4, "float32", (1,)),  # past the file's end
    (0, 4, "load", (1,)),  # a name of torch that is no dtype
    (0, 8, "float32", (1,)),  # bytes that are not its shape's
    (-64, 4, "float32", (1,)),
    (0, 4, "float32"),  # malformed
])
def test_a_slot_that_does_not_fit_the_file_is_refused(slot):
    fd = os.memfd_create("kernelmill-results", os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, 1 << 16)
        with pytest.raises(SlotError):
            attach_slots({"outputs": [TensorSlot(slot)]}, fd)
    finally:
        os.close(fd)


def test_result_tensors_past_the_file_size_limit_are_a_clear_error():
    result = run_in_worker(SOURCE, {"source": "import torch\ndef main():\n"
                                              "    return {'x': torch.zeros(1 << 20)}\n"},
                           timeout_s=60, device="cpu", limits={"file_size": 1 << 20})
    assert not result.ok and not result.tampered
    assert "too large to grade at this size" in result.error["message"], result.error


def test_a_results_file_the_worker_cannot_write_leaves_the_tensors_in_the_frame():
    fd = os.memfd_create("kernelmill-results", os.MFD_ALLOW_SEALING)
    read_only = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
    try:
        value = {"x": torch.ones(1 << 16)}
        assert slot_tensors(value, read_only) is value
    finally:
        os.close(read_only)
        os.close(fd)


def test_results_with_slots_decode_in_several_grading_threads_at_once():
    """The parent's grading threads decode results at once: the slots' class stays allowed for
    every load in the process (a context that restored the list when one load ended left
    another thread's load without it)."""
    import threading

    results = []

    def run():
        results.append(run_in_worker(SOURCE, {"source": RESULT}, timeout_s=120, device="cpu"))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and all(r.ok for r in results), [r.error for r in results]


WRITTEN_EARLY = (
    "import torch\n"
    "from kernelmill.validate.harness_worker import result_slot\n"
    "def main(payload):\n"
    "    g = torch.Generator().manual_seed(7)\n"
    "    big = torch.randn(300, 1000, generator=g)\n"
    "    base = torch.randn(400, 400, generator=g)\n"
    "    early = result_slot(big)\n"
    "    big.zero_()  # written when put: later changes are not in the result\n"
    "    return {'early': early, 'late': base, 'small': result_slot(torch.arange(5)),\n"
    "            'again': result_slot(base.t())}\n")


def test_tensors_a_task_writes_as_it_makes_them_come_back_beside_the_others():
    """``harness_worker.result_slot``: a trusted task's tensor written into the results file
    at once (its slot in the result); the result's other large tensors go after it."""
    result = run_in_worker(SOURCE, {"source": WRITTEN_EARLY}, timeout_s=60, device="cpu",
                           early_results=True)
    assert result.ok, result.error
    got = result.value
    big, base = _expected()
    assert torch.equal(got["early"], big) and torch.equal(got["late"], base)
    assert got["again"] is None  # not contiguous: the task keeps a copy with its strides
    assert got["small"] is None  # too small for the file: the task keeps its own copy


def test_a_tensor_written_early_past_the_file_size_limit_is_a_clear_error():
    source = ("import torch\nfrom kernelmill.validate.harness_worker import result_slot\n"
              "def main(payload):\n    return {'x': result_slot(torch.zeros(1 << 20))}\n")
    result = run_in_worker(SOURCE, {"source": source}, timeout_s=60, device="cpu",
                           limits={"file_size": 1 << 20}, early_results=True)
    assert not result.ok and "too large to grade at this size" in result.error["message"]


def test_a_run_not_asked_for_early_results_holds_no_results_file_for_its_task():
    """Only a trusted target's run (``early_results=True``) may write its results file as it
    goes: any other's ``result_slot`` writes nothing (its tensors come back as before), and the
    slots of the result go where the file's own size says, not where an object says."""
    result = run_in_worker(SOURCE, {"source": WRITTEN_EARLY}, timeout_s=60, device="cpu")
    assert result.ok, result.error
    assert result.value["early"] is None and result.value["again"] is None
    big, base = _expected()
    assert torch.equal(result.value["late"], base)


def test_a_results_file_written_as_it_goes_keeps_layouts_rewinds_and_gives_up_quietly():
    from kernelmill.validate.tensor_slots import ResultsFile

    fd = os.memfd_create("kernelmill-results", os.MFD_ALLOW_SEALING)
    try:
        results = ResultsFile(fd)
        first = results.put(torch.arange(1 << 16, dtype=torch.float32))
        assert isinstance(first, TensorSlot) and first[0] == 0
        assert results.put(torch.zeros(300, 400).t()) is None  # strided: kept with its strides
        mark = results.end
        results.put(torch.ones(1 << 16))
        assert os.fstat(fd).st_size > mark
        results.rewind(mark)  # a task that runs its work again drops the first pass's
        assert os.fstat(fd).st_size == mark == results.end
        read_only = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
        try:
            cannot = ResultsFile(read_only)
            assert cannot.put(torch.ones(1 << 16)) is None and cannot.fd is None
        finally:
            os.close(read_only)
    finally:
        os.close(fd)


SHOWN = (
    "import torch\n"
    "from kernelmill.validate.harness_worker import result_slot\n"
    "def main(payload):\n"
    "    g = torch.Generator().manual_seed(7)\n"
    "    seen = torch.randn(300, 1000, generator=g)\n"
    "    weight = torch.randn(400, 400, generator=g)\n"
    "    answer = torch.full((200, 1000), 4321.0)\n"
    "    return {'inputs': [result_slot(seen, shown=True)],\n"
    "            'state_dict': {'w': result_slot(weight, shown=True)},\n"
    "            'outputs': [result_slot(answer)]}\n")

READS_PAYLOAD = (
    "import os, torch\n"
    "def main(payload):\n"
    "    maps = [l for l in open('/proc/self/maps') if 'kernelmill' in l]\n"
    "    return {'sum': float(payload['inputs'][0].double().sum()),\n"
    "            'w': float(payload['state_dict']['w'].double().sum()),\n"
    "            'files': sorted({l.split()[-2] if l.split()[-1] == '(deleted)' else\n"
    "                             l.split()[-1] for l in maps})}\n")


def test_a_reference_runs_shown_tensors_reach_the_next_worker_as_the_same_sealed_file():
    """What a trusted run marks ``shown`` (the inputs and weights a candidate is given) comes
    back in a file of its own, which the parent passes on as it is to a worker whose payload's
    large tensors all lie there: no copy, and what the candidate may not see (the outputs)
    is not in that file. A tensor the parent changed in place is copied as before."""
    from kernelmill.validate.payload_files import _tensor_file

    result = run_in_worker(SOURCE, {"source": SHOWN}, timeout_s=60, device="cpu",
                           early_results=True)
    assert result.ok, result.error
    got = result.value
    big, base = _expected()
    assert torch.equal(got["inputs"][0], big) and torch.equal(got["state_dict"]["w"], base)
    assert torch.equal(got["outputs"][0], torch.full((200, 1000), 4321.0))
    shown = result.shown
    assert shown is not None and shown.fd is not None
    data = bytes(shown.map())
    assert torch.full((8,), 4321.0).numpy().tobytes() not in data  # no output in it

    payload = {"inputs": got["inputs"], "state_dict": got["state_dict"], "seed": 3}
    moved, fd = _tensor_file(payload)
    try:
        assert os.fstat(fd).st_ino == os.fstat(shown.fd).st_ino  # the same file, passed on
        assert isinstance(moved["inputs"][0], TensorSlot) and moved["seed"] == 3
    finally:
        os.close(fd)
    ran = run_in_worker(SOURCE, {"source": READS_PAYLOAD, **payload}, timeout_s=60,
                        device="cpu")
    assert ran.ok, ran.error
    assert ran.value["sum"] == pytest.approx(float(big.double().sum()))
    assert ran.value["w"] == pytest.approx(float(base.double().sum()))
    assert "/memfd:kernelmill-shown" in ran.value["files"]

    got["inputs"][0].add_(1.0)  # changed here after the run: the file no longer says so
    moved, fd = _tensor_file(payload)
    try:
        assert os.fstat(fd).st_ino != os.fstat(shown.fd).st_ino
    finally:
        os.close(fd)
    ran = run_in_worker(SOURCE, {"source": READS_PAYLOAD, **payload}, timeout_s=60,
                        device="cpu")
    assert ran.ok and ran.value["sum"] == pytest.approx(float(big.double().sum()) + big.numel())
    assert "/memfd:kernelmill-payload" in ran.value["files"]


def test_a_shown_slot_from_a_run_that_has_no_shown_file_is_a_tampered_channel():
    """Only a trusted run has a shown file: a result that names one otherwise (a forged
    frame) is refused, never mapped from somewhere else."""
    from kernelmill.validate.tensor_slots import ShownSlot

    fd = os.memfd_create("kernelmill-results", os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, 1 << 16)
        with pytest.raises(SlotError, match="no shown file"):
            attach_slots({"outputs": [ShownSlot((0, 1 << 16, "uint8", (1 << 16,)))]}, fd)
    finally:
        os.close(fd)


def test_passing_a_sealed_file_on_keeps_view_shapes_and_lets_the_file_go():
    """Two views that start at the same byte of a shown file keep their own shapes on the
    worker's side; an inference tensor (no version counter) is copied, not a crash; and asking
    holds no file alive past its owner (no reference cycle)."""
    import gc
    import weakref

    from kernelmill.validate.tensor_slots import (
        SealedFile,
        passed_on,
        plain_cpu_tensor,
        restore_slots,
    )

    def large(v):
        return plain_cpu_tensor(v, torch) and v.numel() * v.element_size() >= 1 << 16

    fd = os.memfd_create("kernelmill-shown", os.MFD_ALLOW_SEALING)
    os.write(fd, torch.arange(1 << 18, dtype=torch.float32).numpy().tobytes())
    sealed = SealedFile(fd)
    assert sealed.seal() == 1 << 20
    base = torch.frombuffer(sealed.map(), dtype=torch.float32)
    flat, square = base[:1 << 16], base[:1 << 16].view(256, 256)
    moved, given = passed_on({"flat": flat, "square": square}, large)
    try:
        data = mmap.mmap(given, 1 << 20, flags=mmap.MAP_PRIVATE,
                         prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(given)
    got = restore_slots(moved, data)
    assert got["flat"].shape == (1 << 16,) and got["square"].shape == (256, 256)
    assert torch.equal(got["square"].reshape(-1), got["flat"])
    with torch.inference_mode():
        inferred = torch.ones(1 << 16)
    assert passed_on({"x": inferred}, large) is None  # copied as before, not a crash

    gc.disable()
    try:
        gone = weakref.ref(sealed)
        del sealed
        assert gone() is None  # nothing of passed_on's kept it
    finally:
        gc.enable()
    with pytest.raises(OSError):
        os.fstat(fd)  # its descriptor closed with it


def test_a_large_late_part_is_written_whole_by_several_threads(monkeypatch):
    """``payload_files.pwrite_all``: a view over two pieces goes out in pieces from a pool of
    threads; every byte lands at its offset, a small one is written by the calling thread."""
    import threading

    from kernelmill.validate import payload_files

    monkeypatch.setattr(payload_files, "WRITE_PIECE_BYTES", 1 << 12)
    writers = set()
    original = payload_files.pwrite_range

    def spy(fd, view, offset):
        writers.add(threading.current_thread().name)
        original(fd, view, offset)

    monkeypatch.setattr(payload_files, "pwrite_range", spy)
    data = bytes(range(256)) * 200  # 51,200 bytes: 13 pieces
    fd = os.memfd_create("test-late")
    try:
        os.ftruncate(fd, 100 + len(data))
        payload_files.pwrite_all(fd, memoryview(data), 100)
        assert os.pread(fd, len(data), 100) == data
        assert any(name.startswith("kernelmill-late-write") for name in writers)
        writers.clear()
        payload_files.pwrite_all(fd, memoryview(data[:5000]), 0)
        assert os.pread(fd, 5000, 0) == data[:5000]
        assert writers == {threading.current_thread().name}
    finally:
        os.close(fd)


def test_a_late_part_whose_piece_fails_raises_only_once_every_piece_ended(monkeypatch):
    import threading
    import time as _time

    from kernelmill.validate import payload_files

    monkeypatch.setattr(payload_files, "WRITE_PIECE_BYTES", 1 << 12)
    done, lock = [], threading.Lock()

    def piece(fd, view, offset):
        if offset == 0:
            raise OSError("no space left")
        _time.sleep(0.05)  # the others still write when the first one fails
        with lock:
            done.append(offset)

    monkeypatch.setattr(payload_files, "pwrite_range", piece)
    with pytest.raises(OSError, match="no space"):
        payload_files.pwrite_all(-1, memoryview(bytes(40_000)), 0)
    assert len(done) == 9  # every other piece had ended before the error came out


def _fds_of_self() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def test_late_parts_are_copied_ahead_and_handed_over_one_file_each_when_asked():
    """``payload_files._LateFile``: each part is copied into a sealed memory file of its own as
    the run starts; the worker's end of the socket holds nothing until a part is released, then
    exactly that part's file (read back as the worker reads it); a part asked for again comes
    without a file; closing leaves no descriptor open."""
    import fcntl
    import socket

    from kernelmill.validate.payload_files import _LateFile

    before = _fds_of_self()
    parts = [{"inputs": [torch.arange(1 << 16, dtype=torch.float32) + i]} for i in range(3)]
    late = _LateFile(parts)
    worker = socket.socket(fileno=late.fd)
    worker.setblocking(False)
    try:
        for event in late._written:
            assert event.wait(10)
        with pytest.raises(BlockingIOError):  # nothing of any part reached the worker's end
            socket.recv_fds(worker, 16, 1)
        late.release(1)
        said, fds, _flags, _address = socket.recv_fds(worker, 16, 1)
        assert said == (1).to_bytes(4, "little") and len(fds) == 1
        seals = fcntl.fcntl(fds[0], getattr(fcntl, "F_GET_SEALS", 1034))
        assert seals & 8 and seals & 2 and seals & 4  # no write, shrink or growth
        with pytest.raises(OSError):
            os.write(fds[0], b"x")
        offset, size = late.table[1]
        data = map_part(fds[0], offset, size)
        os.close(fds[0])
        got = read_part(data, size)
        assert torch.equal(got["inputs"][0], parts[1]["inputs"][0])
        del got, data  # (the mapping holds a descriptor of its own)
        with pytest.raises(BlockingIOError):  # parts 0 and 2 are still not there
            socket.recv_fds(worker, 16, 1)
        late.release(1)  # asked again: an answer without a file
        said, fds, _flags, _address = socket.recv_fds(worker, 16, 1)
        assert said == (1).to_bytes(4, "little") and fds == []
    finally:
        worker.close()
        late.close()
    assert _fds_of_self() <= before  # the unreleased parts' files and the socket are closed


def test_a_late_part_that_could_not_be_copied_is_answered_empty_and_raises(monkeypatch):
    import socket

    from kernelmill.validate import payload_files

    def failing(fd, view, offset):
        raise OSError("no space left")

    monkeypatch.setattr(payload_files, "pwrite_all", failing)
    late = payload_files._LateFile([{"x": torch.ones(1 << 16)}])
    worker = socket.socket(fileno=late.fd)
    try:
        with pytest.raises(OSError, match="late part 0 could not be written: no space"):
            late.release(0)
        said, fds, _flags, _address = socket.recv_fds(worker, 16, 1)
        assert said == (0).to_bytes(4, "little") and fds == []  # the worker raises, never waits
    finally:
        worker.close()
        late.close()


def test_late_parts_without_landlock_are_copied_only_when_asked():
    """Without ``ahead`` (a worker Landlock does not keep out of the grader's descriptors) no
    part waits in a file of the grader's: each is copied as it is released."""
    import socket

    from kernelmill.validate.payload_files import _LateFile

    late = _LateFile([{"x": torch.ones(1 << 16)}, {"x": torch.zeros(1 << 16)}], ahead=False)
    worker = socket.socket(fileno=late.fd)
    try:
        assert late._files == [None, None] and not any(e.is_set() for e in late._written)
        late.release(1)
        said, fds, _flags, _address = socket.recv_fds(worker, 16, 1)
        assert said == (1).to_bytes(4, "little") and len(fds) == 1
        os.close(fds[0])
        assert late._files == [None, None] and not late._written[0].is_set()
    finally:
        worker.close()
        late.close()


_PART_THIEF = '''
import os

def main(payload):
    """Open every memory file of the grader's that holds a late part."""
    opened = 0
    folder = f"/proc/{payload['grader']}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return {"opened": 0}
    for name in names:
        try:
            if "kernelmill-late" not in os.readlink(f"{folder}/{name}"):
                continue
            with open(f"{folder}/{name}", "rb") as handle:
                opened += len(handle.read(64)) > 0
        except OSError:
            pass
    return {"opened": opened}
'''


def test_late_parts_copied_ahead_are_out_of_a_confined_workers_reach():
    """Copied ahead, the parts wait among this process's descriptors: a worker under Landlock
    cannot open them through ``/proc/<grader>/fd``, one outside it can (which is why, without
    Landlock, ``harness.late_ahead`` copies them only when asked for)."""
    from kernelmill.validate.harness import late_ahead
    from kernelmill.validate.payload_files import _LateFile
    from kernelmill.validate.sandbox import abi_version

    if abi_version() <= 0:
        pytest.skip("no Landlock on this kernel")
    assert late_ahead(True) and not late_ahead(False)

    def held() -> int:  # this process's late-part files (other tests' parts may linger)
        folder = "/proc/self/fd"
        count = 0
        for name in os.listdir(folder):
            try:
                count += "kernelmill-late" in os.readlink(f"{folder}/{name}")
            except OSError:
                pass
        return count

    before = held()
    late = _LateFile([{"x": torch.ones(1 << 16)} for _ in range(2)], ahead=True)
    try:
        for event in late._written:
            assert event.wait(10)
        assert all(fd is not None for fd in late._files)
        payload = {"source": _PART_THIEF, "grader": os.getpid()}
        confined = run_in_worker("kernelmill.validate.harness:run_source", payload,
                                 timeout_s=60, device="cpu", sandbox=True)
        bare = run_in_worker("kernelmill.validate.harness:run_source", payload,
                             timeout_s=60, device="cpu", sandbox=False)
    finally:
        late.close()
        os.close(late.fd)
    assert confined.ok and bare.ok, (confined.error, bare.error)
    assert confined.value["opened"] == 0
    assert bare.value["opened"] == before + 2


def test_a_workers_open_file_limit_stays_below_the_graders():
    """Descriptors parked in sockets count against their user's limit, checked against the
    sender's: a worker's limit sits below this process's by more than one message's
    descriptors, so no worker can make a late part's hand-over fail (``harness.WORKER_FILES``)."""
    import resource

    from kernelmill.validate.harness import WORKER_FILES, worker_files

    source = ("import resource\n"
              "def main():\n"
              "    return {'files': list(resource.getrlimit(resource.RLIMIT_NOFILE))}\n")
    run = run_in_worker("kernelmill.validate.harness:run_source", {"source": source},
                        timeout_s=60, device="cpu")
    assert run.ok, run.error
    ours = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    soft, hard = run.value["files"]
    assert soft == hard == worker_files() <= WORKER_FILES
    assert ours == resource.RLIM_INFINITY or soft <= ours - 2 * 253


DELIVERS = (
    "import os, torch\n"
    "from kernelmill.validate.harness_worker import deliver, receive, result_slot, shown_values\n"
    "def main(payload):\n"
    "    g = torch.Generator().manual_seed(7)\n"
    "    seen = torch.randn(300, 1000, generator=g)\n"
    "    weight = torch.randn(400, 400, generator=g)\n"
    "    sent = [result_slot(seen, shown=True), 5]\n"
    "    deliver({'inputs': sent, 'weight': weight, 'outputs': [result_slot(seen * 2)]})\n"
    "    if payload.get('exit'):\n"
    "        os._exit(0)\n"
    "    back = shown_values(sent)  # what it sent, read back from its sealed shown file\n"
    "    asked = receive()\n"
    "    return {'asked': asked, 'again': seen * 3,\n"
    "            'read_back': bool(torch.equal(back[0], seen)) and back[1] == 5}\n")


def test_a_trusted_run_delivers_its_results_before_its_end():
    """``harness_worker.deliver``: a trusted run's results (its files sealed, its shown file
    passed on as at the end) reach the parent while the worker goes on; what it returns at its
    end is the run's own result. A run whose parent did not ask for a delivery, or a candidate's
    (no results file of its task's), cannot send one."""
    import threading
    import time

    from kernelmill.validate.harness import Control

    control, got = Control(), []
    arrived = threading.Event()

    def on_delivered(result):
        got.append((result, time.monotonic()))
        arrived.set()

    ended = []

    def run():
        ended.append(run_in_worker(SOURCE, {"source": DELIVERS}, timeout_s=60, device="cpu",
                                   control=control, early_results=True,
                                   on_delivered=on_delivered))

    thread = threading.Thread(target=run)
    thread.start()
    assert arrived.wait(60) and not ended  # delivered, and the worker still runs
    delivered = got[0][0]
    assert delivered.ok, delivered.error
    big, base = _expected()
    assert torch.equal(delivered.value["inputs"][0], big) and delivered.value["inputs"][1] == 5
    assert torch.equal(delivered.value["weight"], base)
    assert torch.equal(delivered.value["outputs"][0], big * 2)
    assert delivered.shown is not None and delivered.shown.fd is not None
    control.send("go on")
    thread.join(60)
    final = ended[0]
    assert final.ok and final.value["asked"] == "go on", final.error
    assert torch.equal(final.value["again"], big * 3) and final.shown is None
    assert final.value["read_back"] is True
    assert delivered.shown.fd is not None  # the delivered result's file outlives the run
    # not asked for: the frame breaks the channel; no results file: nothing to deliver
    unasked = run_in_worker(SOURCE, {"source": DELIVERS}, timeout_s=60, device="cpu",
                            early_results=True)
    assert not unasked.ok and unasked.tampered
    untrusted = run_in_worker(SOURCE, {"source": DELIVERS}, timeout_s=60, device="cpu")
    assert not untrusted.ok and "no results file to deliver" in untrusted.error["message"]


def test_a_worker_that_leaves_its_parts_unread_is_refused_not_waited_for():
    """The hand-over never waits on a worker's full socket (``MSG_DONTWAIT``, which
    ``socket.send_fds`` drops before Python 3.12): ``LateRefused`` instead."""
    import threading

    from kernelmill.validate.payload_files import LateRefused, _LateFile

    late = _LateFile([{"seed": 1, "inputs": [torch.ones(4)]}], ahead=False)
    worker = socket.socket(fileno=late.fd)
    outcome = []

    def flood():
        try:
            for _ in range(1 << 20):  # part 0 again and again, nothing read at the other end
                late.release(0)
            outcome.append("never full")
        except LateRefused as exc:
            outcome.append(exc)

    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    thread.join(60)
    try:
        assert outcome and isinstance(outcome[0], LateRefused), outcome or "it waited"
    finally:
        late.close()
        worker.close()


LATE_PARTS = (
    "import torch\n"
    "from kernelmill.validate.harness_worker import late_part\n"
    "def main(payload):\n"
    "    g = torch.Generator().manual_seed(7)\n"
    "    big = torch.randn(300, 1000, generator=g)\n"
    "    parts = [late_part({'seed': i, 'inputs': [big * i, 3]}) for i in range(payload['n'])]\n"
    "    return {'parts': parts, 'forged': payload.get('forged')}\n")


def test_a_trusted_runs_late_parts_come_back_as_sealed_files_of_their_own():
    """``harness_worker.late_part``: each part a trusted run writes is a memory file of its
    own, sealed by the parent and held in the result as a ``LatePart`` that a candidate's run
    is handed as it is (``_LateFile``: no copy); a result naming a part that never came is not
    trusted; a run not asked for parts makes none."""
    from kernelmill.validate.payload_files import LatePart, _LateFile
    from kernelmill.validate.tensor_slots import LATE_PART

    result = run_in_worker(SOURCE, {"source": LATE_PARTS, "n": 12}, timeout_s=60, device="cpu",
                           early_results=True, late_parts=True)
    assert result.ok, result.error
    parts = result.value["parts"]
    assert len(parts) == 12 and all(type(p) is LatePart for p in parts)
    import fcntl
    seals = fcntl.fcntl(parts[5].fd, getattr(fcntl, "F_GET_SEALS", 1034))
    assert seals & 8  # F_SEAL_WRITE: nobody changes a part after the parent took it
    late = _LateFile(parts[5:6], ahead=True)
    worker = socket.socket(fileno=late.fd)
    try:
        late.release(0)
        said, fds = recv_fds(worker, 16, 1)
        size = late.table[0][1]
        got = read_part(mmap.mmap(fds[0], size, flags=mmap.MAP_PRIVATE), size)
        os.close(fds[0])
        big, _base = _expected()
        assert got["seed"] == 5 and got["inputs"][1] == 3
        assert torch.equal(got["inputs"][0], big * 5)
    finally:
        late.close()
        worker.close()
    forged = run_in_worker(SOURCE, {"source": LATE_PARTS, "n": 1, "forged": {LATE_PART: 7}},
                           timeout_s=60, device="cpu", early_results=True, late_parts=True)
    assert not forged.ok and forged.tampered and "never came" in forged.error["message"]
    plain = run_in_worker(SOURCE, {"source": LATE_PARTS, "n": 1}, timeout_s=60, device="cpu",
                          early_results=True)
    assert plain.ok and plain.value["parts"] == [None]
    for part in parts:
        part.close()


def test_a_run_that_ends_while_its_delivery_is_read_waits_for_it(monkeypatch):
    """The end of a run closes its files only once a delivery being read is done with them
    (else it sealed and mapped whatever file took their numbers), however long that takes."""
    import time

    import kernelmill.validate.harness as H

    real = H.attach_slots

    def slow(*args, **kwargs):
        time.sleep(1.5)  # past the end's wait for its reader thread, set below
        return real(*args, **kwargs)

    monkeypatch.setattr(H, "attach_slots", slow)
    monkeypatch.setattr(H, "READER_JOIN_S", 0.1)
    got = []
    final = run_in_worker(SOURCE, {"source": DELIVERS, "exit": True}, timeout_s=60,
                          device="cpu", early_results=True, on_delivered=got.append)
    assert got and got[0].ok, got and got[0].error
    big, _base = _expected()
    assert torch.equal(got[0].value["outputs"][0], big * 2)
    assert torch.equal(got[0].value["inputs"][0], big) and got[0].shown.fd is not None
    assert not final.ok  # it ended without a result of its own


def test_a_device_tensor_looked_at_in_pieces_is_written_whole_and_in_order():
    """``look`` may give a device tensor's bytes as pieces in order (``inputs.look_pieces``:
    through the staging buffer, a tensor larger than it): a results file and a late part hold
    its bytes as they were. A meta tensor stands for the device one here; its bytes come from
    a host tensor like it."""
    from kernelmill.validate.tensor_slots import ResultsFile, write_part

    real = torch.randn(5 * 4096 + 5, dtype=torch.float32)  # over SLOT_BYTES
    device = torch.empty_like(real, device="meta")

    def pieces(tensor, size=30000):
        assert tensor is device
        flat = real.view(torch.uint8)
        for start in range(0, flat.numel(), size):
            yield flat[start:start + size].clone()

    fd = os.memfd_create("kernelmill-results", os.MFD_ALLOW_SEALING)
    try:
        results = ResultsFile(fd)
        slot = results.put(device, pieces)
        offset, nbytes, dtype, shape = slot
        assert (nbytes, dtype, shape) == (real.numel() * 4, "float32", tuple(real.shape))
        written = os.pread(fd, nbytes, offset)
        assert written == real.numpy().tobytes()
        # a look that gives fewer bytes than the tensor holds is an error, not a short slot
        with pytest.raises(ValueError, match="bytes of a"):
            results.put(device, lambda t: iter([real.view(torch.uint8)[:100].clone()]))
    finally:
        os.close(fd)
    part = os.memfd_create("kernelmill-late", os.MFD_ALLOW_SEALING)
    try:
        size = write_part(part, {"inputs": [device, 3]}, pieces)
        data = bytearray(os.pread(part, size, 0))
        back = read_part(memoryview(data), size)
        assert torch.equal(back["inputs"][0], real) and back["inputs"][1] == 3
    finally:
        os.close(part)


@pytest.mark.gpu
def test_a_cuda_tensor_larger_than_the_staging_buffer_is_looked_at_in_pieces():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from kernelmill.grade.worker import inputs as I

    torch.cuda.init()  # (the buffer is reserved only in a process whose CUDA is up)
    I.reserve_staging(1 << 20)
    buffer = I._staged()
    assert buffer is not None
    value = torch.randn(3 * (buffer.numel() // 4) + 123, device="cuda")
    got = b"".join(piece.numpy().tobytes() for piece in I.look_pieces(value))
    assert got == value.cpu().numpy().tobytes()
    small = torch.randn(1000, device="cuda")
    pieces = list(I.look_pieces(small))
    assert len(pieces) == 1 and pieces[0].numpy().tobytes() == small.cpu().numpy().tobytes()

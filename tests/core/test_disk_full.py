"""A full disk (or a file-size limit) mid-write: one line naming the file, nothing already written
lost, no half record left behind, and a rerun resumes once there is room."""
from __future__ import annotations

import errno
import json
import subprocess
import sys
import textwrap

import pytest

from kernelmill.core.store import JsonlWriter, WriteFailed, read_jsonl, replace_jsonl


def _rows(n, start=0):
    return [{"id": f"p{i}", "source": "x" * 200} for i in range(start, start + n)]


class _FullDisk:
    """A raw file whose writes succeed for ``room`` bytes, then write part and fail ENOSPC."""

    def __init__(self, handle, room):
        self.handle, self.room = handle, room

    def write(self, data):
        data = bytes(data)
        if len(data) <= self.room:
            self.room -= len(data)
            return self.handle.write(data)
        if self.room:
            written = self.handle.write(data[:self.room])
            self.room = 0
            return written  # a short write: the next call hits the full disk
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.handle, name)


def test_enospc_mid_record_keeps_every_earlier_record_and_no_fragment(tmp_path):
    path = tmp_path / "validated.jsonl"
    writer = JsonlWriter(path)
    for row in _rows(3):
        writer.write(row)
    writer._handle = _FullDisk(writer._handle, room=100)  # the 4th record fits only in part
    with pytest.raises(WriteFailed) as info:
        writer.write(_rows(1, start=3)[0])
    writer.close()
    message = str(info.value)
    assert message.startswith(f"{path}: cannot write: No space left on device; the 3 record(s) "
                              "before it are kept")
    assert "\n" not in message
    assert [r["id"] for r in read_jsonl(path)] == ["p0", "p1", "p2"]
    assert path.read_bytes().endswith(b"\n")  # the partial line was cut back off
    with JsonlWriter(path) as again:  # space freed: the rerun resumes after p2
        assert [again.write(r) for r in _rows(5)] == [False, False, False, True, True]
    assert [r["id"] for r in read_jsonl(path)] == [f"p{i}" for i in range(5)]
    assert not (tmp_path / "validated.jsonl.partial").exists()


def test_enospc_in_a_whole_file_stage_leaves_the_previous_output(tmp_path):
    path = tmp_path / "deduped.jsonl"
    with replace_jsonl(path) as out:
        for row in _rows(2):
            out.write(row)
    before = path.read_bytes()
    with pytest.raises(WriteFailed, match=rf"^{path}: cannot write: No space left on device; "
                                          "the previous deduped.jsonl is left as it was$"):
        with replace_jsonl(path) as out:
            out._handle = _FullDisk(out._handle, room=300)
            for row in _rows(4, start=10):
                out.write(row)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deduped.jsonl"]


@pytest.mark.parametrize("limit", [700, 1500])
def test_file_size_limit_in_a_real_process(tmp_path, limit):
    """RLIMIT_FSIZE makes the kernel refuse the write (EFBIG) like a full disk would."""
    path = tmp_path / "out.jsonl"
    code = textwrap.dedent(f"""
        import resource, signal, sys
        from kernelmill.app.cli import main
        from kernelmill.core.errors import KernelmillError
        from kernelmill.core.store import JsonlWriter
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
        try:
            with JsonlWriter({str(path)!r}) as out:
                for i in range(100):
                    out.write({{"id": f"p{{i}}", "source": "x" * 200}})
        except KernelmillError as exc:
            print(f"kernelmill: error: {{exc}}", file=sys.stderr)
            sys.exit(2)
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    sizes = [len(json.dumps(r, separators=(",", ":"))) + 1 for r in _rows(100)]
    fit = max(k for k in range(101) if sum(sizes[:k]) <= limit)  # whole records under the limit
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip() == (f"kernelmill: error: {path}: cannot write: File too large; the "
                                  f"{fit} record(s) before it are kept; free space and rerun to "
                                  "resume")
    assert [r["id"] for r in read_jsonl(path)] == [f"p{i}" for i in range(fit)]
    assert path.stat().st_size == sum(sizes[:fit])  # no fragment of the record that failed


def test_a_write_error_mid_stage_stops_new_work_and_exits_with_its_own_status(tmp_path):
    """The validate stage's writer fails (a full disk) while slot threads are inside their runs:
    no further item starts, the runs in progress end, and the process exits 2 with its message
    (daemon slot threads left running at shutdown aborted it: SIGABRT, 134)."""
    started = tmp_path / "started"
    code = textwrap.dedent(f"""
        import sys, time
        from kernelmill.core.errors import KernelmillError
        from kernelmill.validate.backends import LocalBackend

        def task(item, slot):
            with open({str(started)!r}, "a") as f:
                f.write(f"{{item}}\\n")
            time.sleep(0.2 if item == 0 else 1.5)
            with open({str(started)!r} + ".ended", "a") as f:
                f.write(f"{{item}}\\n")
            return item

        try:
            for item, _ in LocalBackend("cpu", 2).map_unordered(task, range(8)):
                raise KernelmillError("out.jsonl: cannot write: No space left on device")
        except KernelmillError as exc:
            print(f"kernelmill: error: {{exc}}", file=sys.stderr, flush=True)
            sys.exit(2)
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert run.stderr.strip() == "kernelmill: error: out.jsonl: cannot write: No space left on device"
    # item 0 ended first, the other slot was inside item 1 and the first may have taken item 2
    # before the error: nothing started after it, and every run that had started ended
    began = sorted(started.read_text().split())
    assert began in (["0", "1"], ["0", "1", "2"]), began
    assert sorted((tmp_path / "started.ended").read_text().split()) == began

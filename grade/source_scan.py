"""Reading an untrusted source, bounded: parse, check and scan it in a scanner process of its own.

Everything the grader reads a submission with before running it (``ast`` for the problem check,
``static.scan``, the optional ``kernelguard`` detector) is only as fast as its slowest input:
kernelguard is quadratic in a line's length and a deeply nested expression overflows every
recursive reader. A read in the grading process would stall every other grade there (a regex
holds the interpreter lock) or crash it. So a source over ``max_source_bytes`` is refused
before anything reads it, and the rest is read in a long-lived scanner process (one per
concurrent caller, reused) that is killed when it takes longer than ``timeout_s`` or exceeds its
memory limit; the caller gets a one-line reason and goes on.
"""
from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

_FRAME = struct.Struct("!I")
# What one scanner may hold (address space): a source of ``max_source_bytes`` parses in far less
_SCANNER_MEMORY = 2 << 30
_REMEMBERED = 512  # reads kept per reader (a batch grades a source once per group)
_START_S = 120.0  # how long a scanner may take to start (imports on a loaded host)


@dataclass(frozen=True)
class SourceRead:
    """What reading one source found: ``refused`` (why it was not read to the end: too large,
    too deep, too slow; the submission's fault), else ``problem`` (the problem check's reason
    and line, as ``core.problem.check_source`` says it) and the static scan's ``findings``."""
    refused: str | None = None
    problem: tuple[str, int | None] | None = None
    findings: list[str] = field(default_factory=list)


def size_refusal(source: str, max_bytes: int) -> str | None:
    """The one-line reason a source is too large to read at all, or None."""
    size = len(source.encode("utf-8", "surrogatepass"))
    if size <= max_bytes:
        return None
    return f"source too large to read: {size:,} bytes (the grader reads at most {max_bytes:,})"


def read_source(source: str, scan: bool) -> dict:
    """The scanner's work on one source (in the scanner process): the candidate check, then the
    static scan when ``scan``."""
    from kernelmill.core.errors import ProblemError
    from kernelmill.core.problem import check_source

    from . import static
    try:
        try:
            check_source(source, "<candidate>", candidate=True)
        except ProblemError as exc:
            return {"problem": [exc.reason, exc.line]}
        return {"findings": static.scan(source) if scan else []}
    except (RecursionError, MemoryError) as exc:
        return {"refused": f"source too deeply nested to read ({type(exc).__name__})"}


class _Scanner:
    """One scanner process: length-prefixed frames on its stdin and stdout. It starts with what
    it needs from this process (the ATen operator names, so it never imports torch) and says
    when it is ready: its start-up (imports, on a loaded host seconds) is not a read's time."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kernelmill.grade.source_scan"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
            start_new_session=True)
        from . import static
        self.ready = self.ask({"aten_operators": sorted(static.aten_operator_names())},
                              _START_S) is not None

    def ask(self, request: dict, timeout_s: float) -> dict | None:
        """The answer, or None when the scanner died or ran out of time (it is then killed)."""
        data = json.dumps(request).encode("utf-8", "surrogatepass")
        try:
            self.process.stdin.write(_FRAME.pack(len(data)) + data)
            self.process.stdin.flush()
            deadline = time.monotonic() + timeout_s
            size = _FRAME.unpack(self._read(_FRAME.size, deadline))[0]
            return json.loads(self._read(size, deadline))
        except (OSError, ValueError, struct.error, TimeoutError):
            self.close()
            return None

    def _read(self, count: int, deadline: float) -> bytes:
        out = self.process.stdout
        chunks, left = [], count
        while left:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([out], [], [], remaining)[0]:
                raise TimeoutError
            chunk = os.read(out.fileno(), left)
            if not chunk:
                raise OSError("scanner closed its output")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, 9)
            except OSError:
                self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass


class SourceReader:
    """Reads sources in scanner processes, one per concurrent caller, reused between reads;
    results are remembered per (source, scan)."""

    def __init__(self, max_source_bytes: int, timeout_s: float) -> None:
        self.max_source_bytes = max_source_bytes
        self.timeout_s = timeout_s
        self._idle: list[_Scanner] = []
        self._lock = threading.Lock()
        self._read: OrderedDict[tuple[str, bool], SourceRead] = OrderedDict()

    def read(self, source: str, scan: bool = True) -> SourceRead:
        refusal = size_refusal(source, self.max_source_bytes)
        if refusal:
            return SourceRead(refused=refusal)
        with self._lock:
            known = self._read.get((source, scan))
            scanner = self._idle.pop() if self._idle else None
        if known is not None:
            if scanner is not None:
                self._give_back(scanner)
            return known
        if scanner is None or not scanner.alive:
            scanner = _Scanner()
        answer = scanner.ask({"source": source, "scan": scan}, self.timeout_s) \
            if scanner.ready else None
        if answer is None and not scanner.ready:
            result = SourceRead(refused="the grader's source scanner did not start")
        elif answer is None:
            result = SourceRead(refused=f"reading the source took over {self.timeout_s:g} s "
                                        "(the grader's limit): too large or too deeply nested")
        else:
            self._give_back(scanner)
            problem = answer.get("problem")
            result = SourceRead(refused=answer.get("refused"),
                                problem=(problem[0], problem[1]) if problem else None,
                                findings=list(answer.get("findings") or []))
        with self._lock:
            self._read[(source, scan)] = result
            while len(self._read) > _REMEMBERED:
                self._read.popitem(last=False)
        return result

    def _give_back(self, scanner: _Scanner) -> None:
        with self._lock:
            self._idle.append(scanner)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for scanner in idle:
            scanner.close()

    def __del__(self) -> None:  # a Grader dropped without close(): no scanner outlives it
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 — interpreter shutdown
            pass


def _serve() -> None:
    """The scanner process: answer frames until the parent closes stdin."""
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (_SCANNER_MEMORY, _SCANNER_MEMORY))
    except (ImportError, ValueError, OSError):
        pass
    from . import native_scan, static

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = stdin.read(_FRAME.size)
        if len(head) < _FRAME.size:
            return
        request = json.loads(stdin.read(_FRAME.unpack(head)[0]))
        if "aten_operators" in request:  # the start: what the scan would import torch for
            names = frozenset(request["aten_operators"])
            # on the module whose global backend_entry_points reads
            native_scan.aten_operator_names = lambda names=names: names
            static.kernelguard_findings("")  # its import, before the first timed read
            answer = json.dumps({"ready": True})
        else:
            answer = json.dumps(read_source(request["source"], bool(request["scan"])))
        data = answer.encode("utf-8", "surrogatepass")
        stdout.write(_FRAME.pack(len(data)) + data)
        stdout.flush()


if __name__ == "__main__":
    _serve()

"""Reading untrusted sources in bounded scanner processes (grade.source_scan)."""
from __future__ import annotations

from kernelmill.grade.source_scan import SourceReader, size_refusal

HEAD = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
HONEST = HEAD + "        return x\n"


def test_a_scanner_killed_at_its_time_limit_is_replaced_and_reads_go_on():
    reader = SourceReader(max_source_bytes=1 << 20, timeout_s=1.0)
    try:
        slow = reader.read(HONEST + "# " + "a" * (200 << 10) + "\n")
        assert slow.refused and "took over 1 s" in slow.refused
        assert not reader._idle  # the scanner that ran out of time is not reused
        after = reader.read(HONEST)
        assert after.refused is None and after.problem is None and after.findings == []
        flagged = reader.read(HONEST + "import os\nos.system('x')\n")
        assert any(".system" in f for f in flagged.findings), flagged
        assert reader.read(HONEST, scan=False).findings == []
        missing = reader.read("x = 1\n")
        assert missing.problem and "ModelNew" in missing.problem[0]
    finally:
        reader.close()


def test_depth_and_size_are_refused_with_their_reason():
    reader = SourceReader(max_source_bytes=16384, timeout_s=5.0)
    try:
        deep = reader.read(HEAD + "        return " + "+".join(["x"] * 5000) + "\n")
        assert deep.refused == "source too deeply nested to read (RecursionError)"
        assert size_refusal("é" * 3000, 4096).startswith("source too large to read: 6,000 bytes")
        assert reader.read("#" * 20000).refused.startswith("source too large to read: 20,000")
        assert size_refusal(HONEST, 4096) is None
    finally:
        reader.close()


def test_a_scanners_start_is_not_a_reads_time_and_it_never_imports_torch():
    """A scanner's start (imports: a second here, many on a host busy compiling) is waited for
    apart; the read itself gets the limit. The ATen operator names come from the parent."""
    reader = SourceReader(max_source_bytes=1 << 20, timeout_s=0.5)
    try:
        native = HONEST + 'src = "at::cpu::add(a, b);"\n'
        found = reader.read(native)
        assert found.refused is None, found
        assert any("at::cpu::add" in f for f in found.findings), found
        (scanner,) = reader._idle
        maps = open(f"/proc/{scanner.process.pid}/maps").read()
        assert "libtorch" not in maps  # torch was never imported there
        # the same scanner answers the next read
        assert reader.read(HONEST + "# another\n").refused is None and reader._idle == [scanner]
    finally:
        reader.close()

"""Static decisions of the grader: a source refused or decided by its scan, unrun."""
from __future__ import annotations

from kernelmill.core.record import Verdict


class StaticGate:
    """The ``Grader``'s decisions before any worker runs: the scanner processes' reading of a
    source (parse, ``ModelNew``, the static scan) and the findings in what its build compiled.
    Reads the grader's ``policy``, ``_reader``, ``_built_findings`` and ``_lock``;
    ``_unrun_verdict`` (the judge of what did not run) is the grader's."""

    def findings(self, source: str) -> list[str]:
        """The static scan's findings: the source's own, and those in the native sources its
        extension build compiled: every text the compile worker's loaders were handed (assembled
        at run time or not) and the sources left in the build folder."""
        if not self.policy.static_scan:
            return []
        own = list(self._reader.read(source, scan=True).findings)
        with self._lock:
            built = self._built_findings.get(source, [])
        seen = {f.split(": ", 1)[-1] for f in own}
        for finding in built:  # the texts handed to the loaders, then the build folder's files
            if finding.split(": ", 1)[-1] not in seen:
                seen.add(finding.split(": ", 1)[-1])
                own.append(finding)
        return own

    def _static(self, source: str) -> dict | None:
        read = self._reader.read(source, scan=self.policy.static_scan)
        if read.refused:
            return Verdict.failure("parse", read.refused, reward=None).to_dict()
        if read.problem:
            reason, line = read.problem
            return Verdict.failure("parse", reason + (f" (line {line})" if line else ""),
                                   reward=None).to_dict()
        return None

    def _decided_statically(self, source: str) -> dict | None:
        """The verdict, without running anything, of a source whose scan alone makes it hacked
        (``Policy.static_first``): a forbidden API or a kernelguard finding. Vendor-library
        calls are not decisive (the policy weighs them against the reference's ops)."""
        own = self._reader.read(source, scan=True).findings if self._static_first() else []
        return self._unrun_verdict(list(own),
                                   "the static scan", compiled=False, profile={"static_only": True})

    def _decided_by_build(self, source: str) -> dict | None:
        """As ``_decided_statically``, for what the extension build compiled: native source
        assembled at run time is judged as a literal is, and gets no GPU run either."""
        with self._lock:
            built = self._built_findings.get(source, []) if self._static_first() else []
        return self._unrun_verdict(built, "the compiled sources", compiled=True,
                                   profile={"static_only": True, "compiled_sources": True})

    def _static_first(self) -> bool:
        return self.policy.static_scan and self.policy.static_first

"""Rebuild a shipped benchmark fingerprint file (hashes and MinHash signatures, no source).

    python scripts/build_fingerprints.py --build-fingerprints ../shared/benchmarks/kernelbench \
        --levels level1 level2 level3 level4 --name KernelBench \
        --source "ScalingIntelligence/KernelBench@423217d (MIT)" \
        --out data/fingerprints/kernelbench.json.gz

The same tree gives the same bytes; `kernelmill split --against builtin:kernelbench` (the default)
reads the result. See kernelmill/splits/contamination.py.
"""
import sys

from kernelmill.splits.contamination import main

if __name__ == "__main__":
    sys.exit(main())

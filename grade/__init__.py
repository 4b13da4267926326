"""Judge candidates against references with the harness: checks, rewards, the TRL adapter.

Kept free of imports so worker processes can load grade modules without parent-side libraries.
"""

"""Records, the JSONL store, the problem loader, dedup, clustering, the pipeline and the CLI."""
from .canonical import canonical_source, source_id
from .errors import KernelmillError, ProblemError
from .problem import CATEGORIES, Problem, check_source, load_problem
from .record import Record
from .stats import StageStats
from .store import JsonlWriter, read_jsonl, read_records

__all__ = ["CATEGORIES", "JsonlWriter", "KernelmillError", "Problem", "ProblemError", "Record",
           "StageStats", "canonical_source", "check_source", "load_problem", "read_jsonl",
           "read_records", "source_id"]

"""Grouped train/eval split, decontamination against benchmarks, HF dataset publishing, exports."""
from .publish import publish_dataset
from .sft import export_sft
from .split import split_file

__all__ = ["export_sft", "publish_dataset", "split_file"]

"""Package data: shipped seed problems, the op catalog and small fixtures."""
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent
SEEDS_DIR = DATA_DIR / "seeds"

"""The input layouts a mined module's tensor input is tried in, by name: each a tuple of size
constants (``C`` is the channel or feature width). Shared by the mining probe (worker side) and
the source renderer, so a probed layout is the one written. Standard library only."""

TEMPLATES = {
    "4d": ("BATCH", "C", "HEIGHT", "WIDTH"),
    "3d": ("BATCH", "SEQ_LEN", "C"),
    "2d": ("BATCH", "C"),
    "3c": ("BATCH", "C", "SEQ_LEN"),
    "5d": ("BATCH", "C", "DEPTH", "HEIGHT", "WIDTH"),
}

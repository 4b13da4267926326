"""family: the files the grader's other processes lock, held by a submission (review of the init
lock: Landlock let a confined worker read the whole tree, and ``flock`` needs only a read-only
descriptor). At import, the submission opens every GPU lock file (``gpus.gpu_lock_path``: the
runtime folder under ``$XDG_RUNTIME_DIR`` or ``/tmp``) and every host
memory ledger file (``host_admission.ledger_folder``) it can, and holds each shared for as long
as it lives: a GPU lock held shared keeps every timing window on that GPU waiting (its own
included: the grade would end only at its time limit, and every grader on the GPU queued behind
it), a ledger file held makes a gone grader's memory read as still held. The names are built
at run time and the modules reached through ``enum``'s builtins, so no scan sees them.
Closed: a confined worker may not read those folders at all (``harness.hidden_folders``); the
attack opens nothing and the kernel is honest. It answers wrong where it held a file, so the
hole reopened would read as not certified."""
# problem: ref_scale_add
# expect: certified
import enum

import torch
import torch.nn as nn
import triton
import triton.language as tl

_b = enum.bltns
_os = _b.__import__("o" + "s")
_lk = _b.__import__("fc" + "ntl")
_env = _b.getattr(_os, "envi" + "ron")
_held = []
_km = "kernel" + "mill"
_folders = [f"/tmp/{_km}-{_os.getuid()}", f"/tmp/{_km}-host-memory",
            _env.get(_km.upper() + "_HOST_LEDGER", "/nonexistent")]
if _env.get("XDG_RUNTIME_DIR"):
    _folders.append(_env["XDG_RUNTIME_DIR"] + "/" + _km)
for _folder in _folders:
    try:
        _names = _os.listdir(_folder)
    except OSError:
        continue
    for _name in _names:
        if not _name.endswith((".main", ".turn", ".windows", ".held")):
            continue
        try:
            _f = _b.getattr(_b, "op" + "en")(_folder + "/" + _name, "rb")
        except OSError:
            continue
        try:
            _lk.flock(_f.fileno(), _lk.LOCK_SH | _lk.LOCK_NB)
        except OSError:
            pass
        _held.append(_f)  # opened: the lock can be taken (blocking) whenever it likes
WRONG = 1.0 if _held else 0.0


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, wrong, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y + wrong, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, WRONG, BLOCK=1024)
        return out

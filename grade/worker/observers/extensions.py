"""Extensions built by ``torch.utils.cpp_extension`` (``load_inline``, ``load``): what they were
built from, which module files they produced, and their calls during forward.

The compile worker notes (and streams to the parent) every native text a loader is handed and
the digest of every module file built; the candidate worker loads only a module file whose
digest the compile worker reported, and counts calls through the module's proxy.
"""
from __future__ import annotations

import itertools
import os
import types

from kernelmill.grade.witness import Witness, dispatch_state
from kernelmill.validate.harness_worker import (
    report,
)

from ..guards.originals import _ORIGINALS, _isinstance
from .counts import _audit_event
from .host_memory import _count_foreign
from .optrace import _spans


class _ExtensionProxy:
    """Stands in for a module built by ``load_inline``/``load``; counts calls during forward."""

    def __init__(self, module):
        object.__setattr__(self, "_module", module)

    def __getattr__(self, name):
        value = getattr(object.__getattribute__(self, "_module"), name)
        if callable(value) and not _isinstance(value, type):
            def call(*args, **kwargs):
                active: list = []
                _count_foreign([*args, *kwargs.values()])
                _audit_event("kernelmill.launch", "ext_calls", _spans([*args, *kwargs.values()]),
                             dispatch_state(), active)
                if active:
                    with Witness.extension():
                        return value(*args, **kwargs)
                return value(*args, **kwargs)
            return call
        return value


def _prebuilt_file(cpp_extension, args: tuple, kwargs: dict) -> str | None:
    """The module file the compile worker already built for this source (loaded without
    running ninja or a compiler: this worker may not create processes); None when there is
    none."""
    name = kwargs.get("name", args[0] if args else None)
    if not isinstance(name, str) or kwargs.get("is_standalone"):
        return None
    try:
        file = os.path.join(cpp_extension._get_build_directory(name, False), f"{name}.so")
    except Exception:  # noqa: BLE001 — fall back to torch's own loader
        return None
    return file if os.path.exists(file) else None


def _file_digest(path: str) -> str:
    import hashlib

    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _native_texts(name: str, args: tuple, kwargs: dict) -> list[str]:
    """The native source text a ``load_inline`` / ``load`` call compiles, and its compiler and
    linker flags (``-Wl,--wrap=...`` renames a symbol the source calls)."""
    flags = [" ".join(v for v in ([value] if isinstance(value, str) else list(value or []))
                      if isinstance(v, str))
             for key, value in kwargs.items() if key.startswith("extra_")]
    if name == "load_inline":
        texts = []
        for index, key in ((1, "cpp_sources"), (2, "cuda_sources")):
            value = kwargs.get(key, args[index] if len(args) > index else None)
            texts += [value] if isinstance(value, str) else list(value or [])
        return [t for t in texts if isinstance(t, str)] + [f for f in flags if f]
    sources = kwargs.get("sources", args[1] if len(args) > 1 else [])
    out = [f for f in flags if f]
    for path in [sources] if isinstance(sources, str) else list(sources or []):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                out.append(handle.read())
        except OSError:
            pass
    return out


# What the compile worker saw built: every native text handed to the loaders and the digest of
# every module file they produced. The parent scans the texts; the candidate worker loads only a
# module file whose digest is among those (``extension_digests``): code built from text nobody
# scanned, or swapped into the folder later, does not load.
_BUILT: dict[str, list] = {"texts": [], "digests": []}


# A native text reaches the parent in parts of at most this many characters (small frames)
STREAMED_PART_CHARS = 256 << 10


def _stream_texts(texts: list[str], send) -> None:
    """Send each text to the parent now, in parts: ``{"native_text": i, "part": str}`` (joined
    again by ``grader.streamed_texts``)."""
    for text in texts:
        index = next(_stream_index)
        for start in range(0, max(1, len(text)), STREAMED_PART_CHARS):
            send({"native_text": index, "part": text[start:start + STREAMED_PART_CHARS]})


_stream_index = itertools.count()


def _install_extension_hooks(prebuilt: bool = True, allowed_digests: list | None = None,
                             stream: bool = False) -> None:
    """Wrap ``load_inline``/``load``: build only in this submission's own folder (a
    ``build_directory`` elsewhere, another submission's build, is ignored), note what is built,
    load what the compile worker built (``prebuilt``) and, given ``allowed_digests``, only a
    module file it built. With ``stream`` each native text goes to the parent the moment a
    loader is handed it, before the build: code that runs later in the worker (the rest of the
    submission's module) cannot take it back, as it could empty the worker's own record."""
    from torch.utils import cpp_extension

    allowed = None if allowed_digests is None else frozenset(allowed_digests)

    def checked(file: str) -> str:
        digest = _file_digest(file)
        if allowed is not None and digest not in allowed:
            raise ImportError(f"extension {os.path.basename(file)} is not what the compile "
                              "worker built (its sources were not scanned)")
        _BUILT["digests"].append(digest)
        return file

    for name in ("load_inline", "load"):
        original = getattr(cpp_extension, name)

        def loader(*args, _original=original, _name=name, _send=report if stream else None,
                   **kwargs):
            kwargs.pop("build_directory", None)
            texts = _native_texts(_name, args, kwargs)
            if _send is not None:
                _stream_texts(texts, _send)
            _BUILT["texts"] += texts
            python_module = kwargs.get("is_python_module", True)
            file = _prebuilt_file(cpp_extension, args, kwargs) if prebuilt else None
            if file is not None:  # checked before it is loaded: no code of it runs otherwise
                module = cpp_extension._import_module_from_library(
                    os.path.basename(file)[:-3], os.path.dirname(checked(file)), python_module)
            else:
                module = _original(*args, **kwargs)
                # a library (``is_python_module=False``) comes back as its path
                built = module if _isinstance(module, str) else getattr(module, "__file__", None)
                if _isinstance(built, str) and os.path.isfile(built):
                    checked(built)
            return _ExtensionProxy(module) if _isinstance(module, types.ModuleType) else module

        setattr(cpp_extension, name, loader)
        _ORIGINALS[f"cpp_extension.{name}"] = (cpp_extension, name, loader)

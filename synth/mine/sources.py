"""Where a SOURCE's files are, without importing it: an installed package name (``torchvision``,
``torch.nn``), a folder of Python files, or a git checkout (a folder with ``.git``).

``discover`` raises ``SourceError`` (one line) for a name that is not installed or a path that
does not exist; the stage turns it into one rejection row and carries on with the next source.
"""
from __future__ import annotations

import importlib.util
import subprocess
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from kernelmill.core.errors import KernelmillError

# SPDX-ish names that the ``--licenses permissive`` filter keeps
PERMISSIVE = ("apache", "mit", "bsd", "isc", "zlib", "psf", "python", "unlicense", "cc0",
              "mpl", "boost", "bsl")
_SKIP_PARTS = {"tests", "test", "testing", "__pycache__", "benchmarks", "examples", "docs"}


class SourceError(KernelmillError):
    """A SOURCE that cannot be read: not installed, no such folder."""


@dataclass
class Source:
    """One SOURCE: its files and what its metadata says."""

    spec: str                 # what the user wrote
    package: str              # the top-level package (``torch``, ``fixture_pkg``)
    root: Path                # folder holding the top-level package's files
    files: list[Path] = field(default_factory=list)
    version: str | None = None
    license: str | None = None
    kind: str = "package"     # package | folder | git
    scope: str = ""           # candidates come from modules under this one (``torch.nn``)

    def in_scope(self, module: str) -> bool:
        return not self.scope or module == self.scope or module.startswith(self.scope + ".")

    def module_name(self, path: Path) -> str:
        rel = path.relative_to(self.root).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        return ".".join([self.package, *parts]) if parts else self.package

    @property
    def permissive(self) -> bool:
        return is_permissive(self.license)


def is_permissive(license_text: str | None) -> bool:
    text = (license_text or "").lower()
    if not text or "gpl" in text or "non-commercial" in text or "noncommercial" in text:
        return False
    return any(word in text for word in PERMISSIVE)


def _python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py")
                  if not (_SKIP_PARTS & set(p.relative_to(root).parts[:-1]))
                  and not p.name.startswith("test_"))


def _dist_metadata(top: str) -> tuple[str | None, str | None]:
    """(version, license) of the distribution that installs the top-level module ``top``."""
    dists = metadata.packages_distributions().get(top) or [top]
    for name in dists:
        try:
            meta = metadata.metadata(name)
        except metadata.PackageNotFoundError:
            continue
        license_text = meta.get("License-Expression") or meta.get("License")
        if not license_text or len(license_text) > 80:  # the whole license text pasted in
            classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or []
                           if c.startswith("License ::")]
            license_text = classifiers[0] if classifiers else (license_text or "")[:80] or None
        return meta.get("Version"), license_text
    return None, None


def _folder_license(root: Path) -> str | None:
    for folder in (root, *root.parents[:2]):
        for name in ("LICENSE", "LICENSE.txt", "LICENSE.md", "COPYING"):
            path = folder / name
            if path.is_file():
                head = path.read_text(encoding="utf-8", errors="replace")[:400]
                for word in ("Apache", "MIT", "BSD", "GPL", "MPL", "ISC"):
                    if word.lower() in head.lower():
                        return word + (" License" if word != "GPL" else "")
                return head.strip().splitlines()[0][:80] if head.strip() else None
    return None


def _git_head(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def discover(spec: str) -> Source:
    """The files of SOURCE ``spec`` (a path when it names an existing folder, else a module)."""
    path = Path(spec).expanduser()
    if path.exists() or "/" in spec or spec.startswith("."):
        if not path.is_dir():
            raise SourceError(f"{spec}: no such folder")
        path = path.resolve()
        git = (path / ".git").exists()
        package_dir = path
        # a folder that is itself a package is mined under its own name
        name = path.name.replace("-", "_")
        source = Source(spec=spec, package=name, root=package_dir, scope=name,
                        kind="git" if git else "folder",
                        version=_git_head(path) if git else None, license=_folder_license(path))
        source.files = _python_files(package_dir)
        return source
    top, _, rest = spec.partition(".")
    try:
        found = importlib.util.find_spec(top)  # a top-level name: finds, never imports
    except (ImportError, ValueError):
        found = None
    if found is None or not found.submodule_search_locations:
        if found is not None and found.origin:  # a single-file module
            root = Path(found.origin).parent
            version, license_text = _dist_metadata(top)
            return Source(spec=spec, package=top, root=root, files=[Path(found.origin)],
                          version=version, license=license_text, scope=top)
        raise SourceError(f"{spec}: not installed (no module {top!r}; pip install it, or give "
                          "a folder)")
    top_root = Path(next(iter(found.submodule_search_locations)))
    root = top_root.joinpath(*rest.split(".")) if rest else top_root
    if not root.is_dir() and not root.with_suffix(".py").is_file():
        raise SourceError(f"{spec}: not installed (no such submodule under {root.parent})")
    version, license_text = _dist_metadata(top)
    # the whole top-level package is indexed (names resolve across it); candidates come from
    # the modules under ``spec`` only
    source = Source(spec=spec, package=top, root=top_root, version=version,
                    license=license_text, scope=spec)
    source.files = _python_files(top_root)
    return source

#!/usr/bin/env bash
# Check the import contracts in pyproject.toml ([tool.importlinter]). import-linter reads the
# source tree, and kernelmill.<folder> maps to ./<folder> (setuptools package-dir), so it is shown
# a tree of links with that shape.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/kernelmill"
for d in core synth validate grade curate splits app data; do ln -s "$PWD/$d" "$root/kernelmill/$d"; done
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" lint-imports --no-cache "$@"

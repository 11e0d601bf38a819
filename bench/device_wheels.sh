#!/usr/bin/env bash
# Here, before a device call: the wheels the H200 (no network) installs from .whl/ (git ignores it):
# dgir built from the working tree, and lark (dgir's one dependency the device image lacks).
# Then carry [".whl"] and run bench/h200_session.sh there with DGIR_GIT_REV=<this commit>.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -z "$(git status --porcelain --untracked-files=no)" ] || echo "warning: uncommitted changes go into the wheel" >&2
rm -f .whl/dgir-*.whl
python3 -m pip wheel -q --no-deps -w .whl .
ls .whl/lark-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps -d .whl lark
ls .whl
echo "DGIR_GIT_REV=$(git rev-parse --short HEAD)"

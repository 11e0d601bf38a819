#!/usr/bin/env bash
# A/B of two revisions on one machine in one call (device; carry .whl and .whl_prev, each holding a
# dgir wheel; lark's wheel in .whl):
#     NEW_REV=<commit> PREV_REV=<commit> bash bench/ab_revisions.sh SPECFILE [rounds]
# -> $OUT/ab_<new|prev>_<round>.json (experiments.py rows), alternating new, prev, new, prev, ...
set -u
: "${NEW_REV:?set NEW_REV and PREV_REV to the commits the two wheels were built from}" "${PREV_REV:?}"
OUT=${OUT:-/tmp/out}
R=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
for v in new prev; do
  src=$R/.whl; [ $v = prev ] && src=$R/.whl_prev
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site_$v \
    "$src"/dgir-*.whl "$R"/.whl/lark-*.whl || exit 3
done
export PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/cuda/bin
for round in $(seq 1 "${2:-2}"); do
  for v in new prev; do
    rev=$NEW_REV; [ $v = prev ] && rev=$PREV_REV
    DGIR_GIT_REV=$rev PYTHONPATH=/tmp/site_$v timeout 150 python3 "$R/bench/experiments.py" --out "$OUT/ab_${v}_$round.json" \
      $(cat "$R/$1") > /dev/null 2>&1; echo "$v round $round rc=$?"
  done
done

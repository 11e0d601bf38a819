# Sourced by the device scripts (h200_session.sh, ncu_compare.sh, ncu_source.sh): the repository root
# R, the output folder OUT, the carried wheels (.whl: dgir + lark) installed into /tmp/site and on
# PYTHONPATH, CUDA's tools on PATH, and NCU (Nsight Compute's CLI, empty when the machine has none).
OUT=${OUT:-/tmp/out}
R=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$R"/.whl/*.whl || exit 3
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/cuda/bin
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)

# Sourced at the start of every device run: install carried wheels and the project without network,
# point the tests at the carried fixture checkpoint. (The device image has CuPy 14 / NVRTC 13.0.)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 3; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/pip-e.log 2>&1 \
  || { cat /tmp/pip-e.log; echo "project install failed"; exit 3; }
export NINFERC_MODELS=$PWD/.fixtures/models
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
python3 -c "import cupy, cuda.bindings, numpy; print('cupy', cupy.__version__, 'cuda-bindings', cuda.bindings.__version__, 'numpy', numpy.__version__); from ninferc.targets.nvrtc import nvrtc_version; print('nvrtc', nvrtc_version())"

"""A/B probe (``bench/gpu.sh``: ``SB_NO_WARM=1 serve_27b W``): ``ninferc serve`` without the CUDA backend's start-up
build of the device-side sampling adjustments' CuPy kernels (``CudaBatchBackend.warm_adjustments``, 2026-12-07), as the
server ran before it: the first requests with penalties, min_p, logit_bias or min_tokens build them, their steps
waiting. Run it with a cold CuPy kernel cache (``SB_COLD_CUPY=1``: ``CUPY_CACHE_DIR`` a new empty folder) beside the
product server on the same machine to time what the warm-up saves the first requests (TTFT).

Usage: ``python3 bench/serve_no_warm.py serve ARGS...`` (the ``ninferc`` command line).
"""

from __future__ import annotations

from ninferc.cli import main
from ninferc.runtime.cuda_backend import CudaBatchBackend

CudaBatchBackend.warm_adjustments = lambda self: None

if __name__ == "__main__":
    main()

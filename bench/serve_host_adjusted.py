"""A/B probe (``bench/gpu.sh``: ``SB_HOST_ADJUST=1 serve_27b W``): ``ninferc serve`` with the rows that need sampling
adjustments -- penalties, min_p, logit_bias, min_tokens -- sampled on the host, as the CUDA backend did before
2026-12-07 (``HostSampler.device_drawable`` read as ``device_ok``: those rows' logits copied to the host, their steps
without decode ahead), to time the device-side adjustments against it on one machine in one call.

Usage: ``python3 bench/serve_host_adjusted.py serve ARGS...`` (the ``ninferc`` command line).
"""

from __future__ import annotations

from ninferc import sampling
from ninferc.cli import main

sampling.HostSampler.device_drawable = property(lambda self: self.device_ok)

if __name__ == "__main__":
    main()

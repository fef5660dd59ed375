"""ninferc: compile a Qwen3.5/3.6/3.8 hybrid checkpoint into a `.ninfer` artifact for one NVIDIA target.

Subpackages (see README "Layout"): ``ninferc.ir`` (ir/), ``ninferc.targets`` (targets/),
``ninferc.runtime`` (runtime/), ``ninferc.templates`` (templates/).
"""

__version__ = "0.1.0"

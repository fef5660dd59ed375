"""Exception types shared by every part of ninferc.

Every error a user can cause (bad config, bad checkpoint, a plan that does not fit a device, a corrupt
artifact) is a subclass of :class:`NinfercError`, whose message names the offending value and the
limit it broke. The CLI prints the message without a traceback and exits with status 2.
"""


class NinfercError(Exception):
    """Base class of all user-facing ninferc errors (message is the whole explanation)."""


class ConfigError(NinfercError):
    """A model config is unsupported or inconsistent (names the field and the value)."""


class CheckpointError(NinfercError):
    """Checkpoint tensors are missing, unexpected or misshapen (lists every problem at once)."""


class TargetError(NinfercError):
    """Unknown arch or SKU, or a device that cannot run the requested target."""


class CompileError(NinfercError):
    """NVRTC rejected a rendered template (carries the NVRTC log and the rendered source's path)."""


class PlanError(NinfercError):
    """A launch does not fit the target: names kernel, target, value and limit."""


class ArtifactError(NinfercError):
    """A `.ninfer` file is truncated, corrupt, or of an unsupported version."""


class RuntimeMemoryError(NinfercError):
    """The memory plan does not fit the device's free memory (lists every term in bytes)."""

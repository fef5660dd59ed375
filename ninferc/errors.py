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


def path_problem(path, expected: str) -> str | None:
    """Why ``path`` cannot be an input (None when it is a regular file or a directory): a symbolic link loop, a
    path that does not exist, or something that is neither a file nor a directory (a FIFO, a device, a socket).
    ``expected`` says what was wanted (``"a checkpoint directory or a .ninfer file"``).
    """
    import errno
    import os
    import stat

    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{str(path)!r} is a symbolic link loop (expected {expected})"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return f"{str(path)!r} does not exist (expected {expected})"
        return f"{str(path)!r} cannot be read ({exc.strerror}; expected {expected})"
    if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
        return None
    kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a character device" if stat.S_ISCHR(st.st_mode) else
            "a block device" if stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else
            "not a regular file")
    return f"{str(path)!r} is {kind}, not a file or a directory (expected {expected})"

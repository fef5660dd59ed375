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
    return f"{str(path)!r} is {_file_kind(st.st_mode)}, not a file or a directory (expected {expected})"


def _file_kind(mode: int) -> str:
    """What a stat mode that is neither a regular file nor a directory is, in words (``a FIFO``, ...)."""
    import stat

    return ("a FIFO" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode) else
            "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def option_given(ctx, name: str) -> bool:
    """Whether the click option ``name`` (its parameter name, e.g. ``draft_tokens``) was given on the command line or
    by an environment variable, not left at its default: an option that would be ignored is refused by name."""
    from click.core import ParameterSource

    return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def output_problem(path, flag: str, example: str = "model.ninfer") -> str | None:
    """Why ``path`` cannot take a file a command writes (None when it can), checked before the work: a directory, a
    symbolic link loop, something that is not a regular file (a FIFO or a device: ``compile``'s temp file + rename
    would replace it with a regular file, ``bench --json`` would block on a FIFO), a missing or unwritable folder.
    Each message starts with ``flag path:``. A link to a regular file is fine (``compile`` replaces the link).
    """
    import errno
    import os
    import stat
    from pathlib import Path

    head = f"{flag} {path}:"
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{head} is a symbolic link loop"
        st = None  # absent (or a dangling link): the folder decides
    if st is not None and stat.S_ISDIR(st.st_mode):
        return f"{head} is a directory; give a file name (e.g. {Path(path) / example})"
    if st is not None and not stat.S_ISREG(st.st_mode):
        return f"{head} is {_file_kind(st.st_mode)}, not a regular file; give a regular file's name"
    folder = Path(os.path.abspath(path)).parent
    try:
        is_dir = folder.is_dir()
    except OSError:  # a loop among the folder's links
        is_dir = False
    if not is_dir:
        return f"{head} folder {folder} does not exist"
    if not os.access(folder, os.W_OK):
        return f"{head} folder {folder} is not writable"
    return None

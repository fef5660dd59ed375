"""Host arrays of the GPU tests' random weights, computed once per machine and shared by every pytest process.

Under pytest-xdist each of 14 workers used to draw and quantise the same 27B-shape weights itself -- a w4
gate|up (34,816 x 5,120) costs ~4 s to draw and ~11 s to quantise with numpy, and one such case took 44 s in
``bench/NOTES.md`` run 195, where the whole kernel tier summed to 3,954 s of test time. :func:`host_cached` keeps
what a ``make()`` returns in an ``.npz`` file under ``$NINFERC_TEST_WEIGHTS`` (default: the system temporary
directory's ``ninferc-test-weights``): the first process computes it under an exclusive lock, the others wait for
the lock and load the file. Files are written whole, synced and renamed into place; one that cannot be read is computed
again, whatever numpy raises on it (an H100's kernel tier of 2026-12-05, ``bench/NOTES.md`` run 207, failed 406
tests on files whose array header read as zero bytes: tokenize's error, which the first version did not catch).
A payload damaged behind a readable header fails the CRC-32 the zip format keeps per member, which zipfile checks
as it reads; so a test never compares a kernel with a reference made from zeroed arrays (zeroed codes and zeroed
reference weights would agree). The
directory outlives a run and may be shared by several checkouts, so the file name also carries a hash of the code
that makes the arrays (``sources``): a changed quantiser or generator gets a new file, never an old one.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import warnings
from pathlib import Path
from typing import Callable

import numpy as np


def cache_dir() -> Path:
    """Where the arrays live: ``$NINFERC_TEST_WEIGHTS`` or ``<tmp>/ninferc-test-weights``."""
    return Path(os.environ.get("NINFERC_TEST_WEIGHTS") or Path(tempfile.gettempdir()) / "ninferc-test-weights")


def _load(path: Path) -> dict[str, np.ndarray] | None:
    """The arrays of ``path``, or None when it is missing or cannot be read: anything numpy or zipfile raises on a
    damaged file (OSError, ValueError, zipfile.BadZipFile -- also for a member whose bytes do not match the CRC-32
    the zip format stores with each member, which zipfile checks as it reads -- tokenize's error on a header of zero
    bytes, ...)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception:  # noqa: BLE001 -- any unreadable file is a cache miss, computed again under the lock
        return None


def host_cached(name: str, make: Callable[[], dict[str, np.ndarray]], sources: tuple[str, ...] = ()) -> dict[
        str, np.ndarray]:
    """``make()`` (a dict of numpy arrays), memoised on disk as ``<cache_dir>/<name>_<hash of sources>.npz`` across
    processes.

    ``name`` must identify the arguments ``make`` depends on (shape, format, seed) and be a valid file name;
    ``sources`` the code it runs (e.g. ``inspect.getsource`` of the generator and of the quantiser's module), whose
    SHA-256 goes into the file name. The returned arrays are fresh copies, safe to modify. Raises ValueError for a
    name that is not a file name, whatever ``make`` raises, and OSError when the directory cannot be made; a file
    that cannot be written (a full disk) gives a warning and the arrays, not stored."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"host_cached: {name!r} is not a file name")
    name = f"{name}_{hashlib.sha256(chr(0).join(sources).encode()).hexdigest()[:16]}"
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}.npz"
    got = _load(path)
    if got is not None:
        return got
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        got = _load(path)  # another process may have made it while this one waited
        if got is not None:
            return got
        arrays = make()
        tmp = root / f"{name}.{os.getpid()}.partial.npz"
        try:
            with open(tmp, "wb") as f:
                np.savez(f, **arrays)
                f.flush()
                os.fsync(f.fileno())  # the bytes on disk before the name points at them
            os.replace(tmp, path)
        except OSError as e:  # e.g. a full disk: the arrays are right, only not kept; the next caller computes again
            tmp.unlink(missing_ok=True)
            warnings.warn(f"host_cached: {name} not stored in {root} ({e}); computed, not cached", stacklevel=2)
            return arrays
        return {k: np.array(v, copy=True) for k, v in arrays.items()}

"""Hugging Face checkpoint directory -> ModelConfig + lazily read weights under IR names.

Tensors are read with `safetensors` (`safe_open(..., framework="np")`, memory-mapped, one tensor at a
time); bf16 tensors come back as `ml_dtypes.bfloat16` numpy arrays. HF names map to IR names through
:func:`ninferc.ir.qwen3_5.hf_name`. The multi-token-prediction head (``mtp.*``) is loaded when the config declares
it (``mtp_num_hidden_layers`` > 0) and otherwise recognised and skipped with a notice, as are vision-tower
tensors.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

import ml_dtypes  # noqa: F401  (registers numpy's bfloat16, which safetensors' numpy backend needs)
import numpy as np
from safetensors import safe_open

from ninferc.errors import CheckpointError
from ninferc.ir.config import ModelConfig
from ninferc.ir.graph import ParamSpec
from ninferc.ir.qwen3_5 import hf_name, mtp_param_specs, param_specs

#: checkpoint name prefixes that belong to parts ninferc does not run (skipped with a notice; ``mtp.`` only when the
#: config declares no MTP head)
SKIPPED_PREFIXES = {
    "mtp.": "multi-token-prediction head",
    "model.visual.": "vision tower",
    "visual.": "vision tower",
    "model.mtp.": "multi-token-prediction head",
}
_DTYPES = {"bfloat16": "bf16", "float32": "f32"}
#: problems one checkpoint error lists (the rest are counted)
MAX_PROBLEMS_SHOWN = 20


class Checkpoint(Mapping):
    """A checkpoint directory seen as a read-only mapping IR param name -> numpy array.

    Args:
        model_dir: directory with ``config.json`` and ``*.safetensors`` (sharded with
            ``model.safetensors.index.json`` or a single ``model.safetensors``).
        validate: check every tensor against the shape the config implies (default True).
        notice: where to print the skipped-tensor notice (default stderr; None for silence).

    Raises:
        ConfigError: see :meth:`ModelConfig.from_dir`.
        CheckpointError: no safetensors files, an unreadable file, or (when validating) missing,
            unexpected or misshapen tensors — all problems listed in one message.
    """

    def __init__(self, model_dir: str | Path, *, validate: bool = True, notice=sys.stderr):
        self.dir = Path(model_dir)
        self.config = ModelConfig.from_dir(self.dir)
        self.specs: dict[str, ParamSpec] = {**param_specs(self.config), **mtp_param_specs(self.config)}
        self._files: dict[str, object] = {}
        self._where: dict[str, Path] = {}  # HF name -> file
        files = sorted(self.dir.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"{str(self.dir)!r} has no *.safetensors files")
        index = self.dir / "model.safetensors.index.json"
        if index.is_file():
            try:
                wm = json.loads(index.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as exc:
                raise CheckpointError(f"{index}: unreadable index ({type(exc).__name__}: {exc})") from None
            if not isinstance(wm, dict):
                raise CheckpointError(f"{index}: weight_map must be an object, found {type(wm).__name__}")
            for name, fname in wm.items():
                # a file name of this folder (no path: the index may not point elsewhere); the entry itself may be a
                # symbolic link, as in the Hugging Face cache (snapshots/<sha>/NAME -> ../../blobs/<hash>)
                plain = isinstance(fname, str) and fname not in ("", ".", "..") and Path(fname).name == fname
                if not plain:
                    raise CheckpointError(f"{index}: tensor {name!r} is mapped to {fname!r}, which is not a file name "
                                          f"of {self.dir} (a name without a folder)")
                if not (self.dir / fname).is_file():
                    what = ("a link to a missing file" if (self.dir / fname).is_symlink() else
                            "missing" if not (self.dir / fname).exists() else "not a regular file")
                    raise CheckpointError(f"{index}: tensor {name!r} is mapped to {fname!r}, which is {what} in "
                                          f"{self.dir}")
                self._where[name] = self.dir / fname
        else:
            for f in files:
                for name in self._open(f).keys():
                    self._where[name] = f
        self.skipped: dict[str, int] = {}
        skipped = {p: w for p, w in SKIPPED_PREFIXES.items()
                   if not (self.config.mtp_num_hidden_layers and p == "mtp.")}
        for name in list(self._where):
            for pre, what in skipped.items():
                if name.startswith(pre):
                    self.skipped[what] = self.skipped.get(what, 0) + 1
                    del self._where[name]
                    break
        if self.skipped and notice is not None:
            parts = ", ".join(f"{n} tensors of the {w}" for w, n in self.skipped.items())
            print(f"notice: skipping {parts} (not declared by config.json or not run by ninferc)", file=notice)
        self._ir_to_hf = {ir: hf_name(ir, self.config) for ir in self.specs}
        if validate:
            self.validate()

    def _open(self, path: Path):
        key = str(path)
        if key not in self._files:
            try:
                self._files[key] = safe_open(key, framework="np")
            except Exception as exc:  # safetensors raises its own error types
                raise CheckpointError(f"{path}: cannot read safetensors file ({exc})") from None
        return self._files[key]

    def _slice(self, hf: str):
        """The safetensors slice of checkpoint tensor ``hf``.

        Raises:
            CheckpointError: the index maps it to a file that does not hold it.
        """
        f = self._open(self._where[hf])
        try:
            return f.get_slice(hf)
        except Exception:  # noqa: BLE001 -- safetensors' own error types
            raise CheckpointError(f"{self.dir}: the index maps {hf!r} to {self._where[hf].name}, which does not hold "
                                  "it") from None

    def validate(self) -> None:
        """Check names, shapes and dtypes of every tensor against :func:`param_specs`.

        Raises:
            CheckpointError: listing every missing, unexpected and misshapen tensor together.
        """
        problems = []
        expected_hf = set(self._ir_to_hf.values())
        for ir, hf in self._ir_to_hf.items():
            spec = self.specs[ir]
            if hf not in self._where:
                problems.append(f"missing {hf} (IR {ir}, expected shape {list(spec.shape)})")
                continue
            sl = self._slice(hf)
            shape = tuple(sl.get_shape())
            want = spec.shape
            if ir.endswith(".gdn.conv"):
                want = (spec.shape[0], 1, spec.shape[1])
            if shape != want:
                problems.append(f"misshapen {hf}: found {list(shape)}, config implies {list(want)}")
            dt = sl.get_dtype()
            if dt not in ("BF16", "F32", "F16"):
                problems.append(f"unsupported dtype {dt} for {hf} (expected BF16, F16 or F32)")
        for hf in sorted(set(self._where) - expected_hf):
            if hf == "lm_head.weight" and self.config.tie_word_embeddings:
                continue  # a tied checkpoint may still carry the copy
            problems.append(f"unexpected {hf}")
        if problems:
            head = f"checkpoint {str(self.dir)!r} does not match its config ({len(problems)} problems):"
            shown = problems[:MAX_PROBLEMS_SHOWN]
            if len(problems) > MAX_PROBLEMS_SHOWN:
                shown.append(f"... and {len(problems) - MAX_PROBLEMS_SHOWN} more")
            raise CheckpointError("\n  ".join([head] + shown))

    # ---- Mapping interface --------------------------------------------------------------------
    def __getitem__(self, ir_name: str) -> np.ndarray:
        """The tensor for IR param ``ir_name`` as stored (bf16 -> ml_dtypes.bfloat16), conv weight
        squeezed to [C, W].

        Every tensor is checked for NaN / Inf as it is read (one pass over the array just read, no second read
        of the file): a checkpoint with non-finite weights would otherwise decode garbage without a word.

        Raises:
            KeyError: an unknown name. CheckpointError: the tensor holds non-finite values (names it and the count).
        """
        hf = self._ir_to_hf[ir_name]
        self._slice(hf)  # a name the file lacks is a CheckpointError, not a traceback
        arr = self._open(self._where[hf]).get_tensor(hf)
        if ir_name.endswith(".gdn.conv") and arr.ndim == 3:
            arr = arr[:, 0, :]
        if not np.isfinite(arr).all():
            bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
            raise CheckpointError(f"{self.dir}: tensor {hf} has {bad} non-finite value{'' if bad == 1 else 's'} (NaN or Inf) of {arr.size}; "
                                  "the checkpoint is damaged")
        return arr

    def __iter__(self):
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def stored_dtype(self, ir_name: str) -> str:
        """'bf16', 'f16' or 'f32' as stored in the file."""
        hf = self._ir_to_hf[ir_name]
        return {"BF16": "bf16", "F32": "f32", "F16": "f16"}[self._slice(hf).get_dtype()]

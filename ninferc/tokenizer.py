"""Tokenizer wrapper over the `tokenizers` library (HF fast tokenizer JSON), with streaming decode."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer
from tokenizers.decoders import DecodeStream

from ninferc.errors import CheckpointError


class Tokenizer:
    """Encode prompts and stream-decode generated ids.

    Args:
        tokenizer_json: the text of ``tokenizer.json``.
        tokenizer_config: parsed ``tokenizer_config.json`` (optional; gives eos/chat template).

    Raises:
        CheckpointError: the JSON cannot be parsed by `tokenizers`.
    """

    def __init__(self, tokenizer_json: str, tokenizer_config: dict | None = None):
        try:
            self._tok = _HFTokenizer.from_str(tokenizer_json)
        except Exception as exc:
            raise CheckpointError(f"tokenizer.json could not be parsed by `tokenizers`: {exc}") from None
        self.config = tokenizer_config or {}

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> "Tokenizer":
        """Load ``tokenizer.json`` (+ ``tokenizer_config.json`` if present) from a checkpoint dir.

        Raises:
            CheckpointError: tokenizer.json missing or invalid.
        """
        d = Path(model_dir)
        tj = d / "tokenizer.json"
        if not tj.is_file():
            raise CheckpointError(f"{str(d)!r} has no tokenizer.json")
        tc = d / "tokenizer_config.json"
        return cls(tj.read_text(), json.loads(tc.read_text()) if tc.is_file() else None)

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer knows (including added tokens)."""
        return self._tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added, as HF's tokenizer does for this family)."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids`` (special tokens skipped)."""
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def stream(self) -> "StreamDecoder":
        """A fresh incremental decoder for one generation."""
        return StreamDecoder(self._tok)

    def token_id(self, token: str) -> int | None:
        """Id of the token string ``token``, or None if unknown."""
        return self._tok.token_to_id(token)


class StreamDecoder:
    """Feed ids one at a time; get back the text they complete (possibly empty while a multi-byte
    character is still incomplete). Backed by `tokenizers.decoders.DecodeStream`."""

    def __init__(self, tok: _HFTokenizer):
        self._tok = tok
        self._ds = DecodeStream(skip_special_tokens=True)

    def step(self, token_id: int) -> str:
        """Feed one id; returns the text it completes (may be empty mid-character)."""
        return self._ds.step(self._tok, int(token_id)) or ""

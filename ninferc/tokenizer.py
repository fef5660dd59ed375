"""Tokenizer wrapper over the `tokenizers` library (HF fast tokenizer JSON), with streaming decode."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer
from tokenizers.decoders import DecodeStream

from ninferc.errors import CheckpointError, NinfercError


class Tokenizer:
    """Encode prompts and stream-decode generated ids.

    Args:
        tokenizer_json: the text of ``tokenizer.json``.
        tokenizer_config: parsed ``tokenizer_config.json`` (optional; gives eos/chat template).

    Raises:
        CheckpointError: the JSON cannot be parsed by `tokenizers`.
    """

    def __init__(self, tokenizer_json: str, tokenizer_config: dict | None = None, chat_template: str | None = None):
        try:
            self._tok = _HFTokenizer.from_str(tokenizer_json)
        except Exception as exc:
            raise CheckpointError(f"tokenizer.json could not be parsed by `tokenizers`: {exc}") from None
        self.config = tokenizer_config or {}
        if chat_template is None:
            chat_template = _config_chat_template(self.config)
        #: the conversation template's jinja source (``chat_template.jinja``, else ``tokenizer_config.json``'s
        #: ``chat_template``), or None when the checkpoint carries none
        self.chat_template: str | None = chat_template

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
        ct = d / "chat_template.jinja"
        cfg = None
        if tc.is_file():
            try:
                cfg = json.loads(tc.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise CheckpointError(f"{tc}: not valid JSON ({exc})") from None
            if not isinstance(cfg, dict):
                raise CheckpointError(f"{tc}: must hold a JSON object, found {type(cfg).__name__}")
        return cls(tj.read_text(), cfg, ct.read_text() if ct.is_file() else None)

    @classmethod
    def synthetic(cls, vocab_size: int) -> "Tokenizer":
        """A stand-in tokenizer for a model with synthetic weights (``ninferc serve --preset``): one word per id,
        id ``i`` <-> ``"t{i}"``, words split on whitespace, ids decoded joined by single spaces; no special tokens
        and no chat template. Benchmarks send prompts as token ids; the text only makes every generated id visible.

        Raises:
            NinfercError: ``vocab_size`` < 1.
        """
        from tokenizers import Tokenizer as HF
        from tokenizers.models import WordLevel
        from tokenizers.pre_tokenizers import WhitespaceSplit

        if vocab_size < 1:
            raise NinfercError(f"a synthetic tokenizer needs at least one id, got vocab_size {vocab_size}")
        hf = HF(WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
        hf.pre_tokenizer = WhitespaceSplit()
        return cls(hf.to_str())

    def check_fits(self, model_vocab: int, where: str = "the model") -> None:
        """Refuse a tokenizer that can produce ids the model has no embedding row for.

        Raises:
            CheckpointError: the tokenizer knows more ids than ``model_vocab`` (names both counts).
        """
        if self.vocab_size > model_vocab:
            raise CheckpointError(f"tokenizer.json knows {self.vocab_size} token ids but {where} has {model_vocab} "
                                  "(vocab_size): a prompt could hold ids the model has no embedding for")

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer knows (including added tokens)."""
        return self._tok.get_vocab_size()

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text`` (special tokens written in the text, such as a chat template's ``<|im_start|>``, are
        recognised as themselves; ``add_special_tokens``: the tokenizer's post-processor adds its own, which for this
        family's tokenizers is none). Releases the GIL while it works (:meth:`_encoding`), so a thread tokenising a
        long prompt leaves the others running."""
        return self._encoding(text, add_special_tokens).ids

    def _encoding(self, text: str, add_special_tokens: bool = False):
        """The ``tokenizers`` Encoding of ``text``. Through ``encode_batch`` of one text: the same ids and offsets as
        ``encode``, but ``encode`` holds the GIL for the whole call (tokenizers 0.23: 8 MB of prompt, ~13 s with every
        other Python thread of the process stopped -- the server's event loop among them) and ``encode_batch``
        releases it."""
        return self._tok.encode_batch([text], add_special_tokens=add_special_tokens)[0]

    def encode_split(self, text: str, at: int) -> tuple[list[int], int | None]:
        """Token ids of ``text`` (as :meth:`encode`, one tokenisation) and how many of them cover exactly
        ``text[:at]`` (a character index, 0..len(text)): None where a token spans character ``at`` (from the
        tokenizer's character offsets). Raises ValueError for ``at`` outside 0..len(text)."""
        if not 0 <= at <= len(text):
            raise ValueError(f"encode_split: character index {at} is outside 0..{len(text)}")
        enc = self._encoding(text)
        n = sum(1 for _, e in enc.offsets if e <= at)
        ok = all(s >= at for s, _ in enc.offsets[n:])
        return enc.ids, n if ok else None

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``; special tokens (``<|im_start|>``, ``<|endoftext|>``, ...) skipped unless
        ``skip_special_tokens`` is false."""
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def stream(self, skip_special_tokens: bool = True) -> "StreamDecoder":
        """A fresh incremental decoder for one generation (special tokens skipped unless ``skip_special_tokens`` is
        false)."""
        return StreamDecoder(self._tok, skip_special_tokens)

    def token_str(self, token_id: int) -> str:
        """The vocabulary string of ``token_id`` (special tokens as written, e.g. ``<|im_end|>``); "" if unknown."""
        return self._tok.id_to_token(int(token_id)) or ""

    def to_json(self) -> str:
        """The tokenizer's ``tokenizer.json`` text (HF tokenizers' serialisation; what llguidance compiles against)."""
        return self._tok.to_str()

    def token_id(self, token: str) -> int | None:
        """Id of the token string ``token``, or None if unknown."""
        return self._tok.token_to_id(token)


class StreamDecoder:
    """Feed ids one at a time; get back the text they complete (possibly empty while a multi-byte
    character is still incomplete). Backed by `tokenizers.decoders.DecodeStream`."""

    def __init__(self, tok: _HFTokenizer, skip_special_tokens: bool = True):
        self._tok = tok
        self._ds = DecodeStream(skip_special_tokens=skip_special_tokens)

    def step(self, token_id: int) -> str:
        """Feed one id; returns the text it completes (may be empty mid-character)."""
        return self._ds.step(self._tok, int(token_id)) or ""


def _config_chat_template(cfg: dict) -> str | None:
    """``tokenizer_config.json``'s ``chat_template``: a string, or a list of ``{"name", "template"}`` from which the
    one named ``default`` is taken (HF's convention); None when absent."""
    ct = cfg.get("chat_template")
    if isinstance(ct, str):
        return ct
    if isinstance(ct, list):
        for item in ct:
            if isinstance(item, dict) and item.get("name") == "default" and isinstance(item.get("template"), str):
                return item["template"]
    return None


class TextOutput:
    """The text of one generation, fed one id at a time: incremental detokenisation (never a broken UTF-8
    character: bytes of an unfinished character wait for the next id) and stop strings.

    A stop string is matched across token boundaries; the text returned stops before it (OpenAI's semantics: the
    stop string is not part of the output), or after it with ``include_stop`` (vLLM's
    ``include_stop_str_in_output``). While the text's tail could still be the start of a stop string, that tail is
    held back -- only the ambiguous part -- and released as soon as it cannot be, or by :meth:`flush`.

    Args:
        tokenizer: a :class:`Tokenizer`.
        stop: stop strings (empty ones are ignored). Where two match, the one that starts first ends the text (of
            those starting at the same character, the first given).
        include_stop: keep the stop string that ended the text at its end.
        skip_special_tokens: leave special tokens (``<|im_end|>``, ...) out of the text (default), or write them.
        min_tokens: the first this many ids cannot end the text: a stop string ends it only where it ends in the
            text of a later id (vLLM's ``min_tokens``, which checks stop strings from the id after them on).
    """

    def __init__(self, tokenizer: Tokenizer, stop=(), *, include_stop: bool = False, skip_special_tokens: bool = True,
                 min_tokens: int = 0):
        self._dec = tokenizer.stream(skip_special_tokens)
        self.stop = tuple(s for s in stop if s)
        self.include_stop = include_stop
        self.min_tokens = min_tokens
        self._pushed = 0
        self._held = ""
        self._held_early = 0  # characters at the start of the held text that the first min_tokens ids wrote
        self.stopped = False

    def push(self, token_id: int) -> tuple[str, bool]:
        """Feed one id: (text that may be shown now, whether a stop string ended the text). After a stop, further
        ids give ``("", True)``."""
        if self.stopped:
            return "", True
        self._pushed += 1
        buf = self._held + self._dec.step(token_id)
        if not self.stop:
            return buf, False
        # text that may not end in a stop string: all of it while within the first min_tokens ids, else the part of
        # the held text that those ids wrote (a stop string may start there and end in this id's text)
        early = len(buf) if self._pushed <= self.min_tokens else self._held_early
        found = [(i, s) for s in self.stop if (i := buf.find(s, max(0, early - len(s) + 1))) >= 0]
        if found:
            cut, s = min(found, key=lambda f: f[0])
            self.stopped, self._held = True, ""
            return buf[:cut + len(s) if self.include_stop else cut], True
        hold = 0
        for s in self.stop:  # the longest tail of buf that is a proper prefix of a stop string
            for k in range(min(len(s) - 1, len(buf)), hold, -1):
                if buf.endswith(s[:k]):
                    hold = k
                    break
        self._held = buf[len(buf) - hold:] if hold else ""
        self._held_early = max(0, early - (len(buf) - hold))
        return buf[:len(buf) - hold], False

    def flush(self) -> str:
        """The held-back tail (the generation ended without completing a stop string)."""
        out, self._held = self._held, ""
        return "" if self.stopped else out

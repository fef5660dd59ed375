"""The reasoning parser of ``ninferc serve --reasoning-parser qwen3``: a chat answer's thinking, the text between
``<think>`` and ``</think>``, goes to the message's ``reasoning`` and ``reasoning_content`` (the fields vLLM's
``--reasoning-parser`` fills -- ``reasoning`` since late 2025, ``reasoning_content`` before, the name llama-server's
``--reasoning-format`` and many clients use -- the same text in both) and the rest to ``content``; the OpenAI client
passes them through as extra attributes.

Where the thinking starts: Qwen3.5-family chat templates end the generation prompt with ``<think>\\n`` when
thinking is on and with an empty ``<think>\\n\\n</think>\\n\\n`` block when ``enable_thinking`` is false, so the
model's output begins inside the block or after it. :func:`starts_in_reasoning` reads that off the rendered prompt
(its last ``<think>`` after its last ``</think>``); where the prompt holds no open block, an output that itself
begins with ``<think>`` (leading whitespace aside) opens one. An answer that ends inside the block (``max_tokens``
reached while thinking) is all reasoning, its ``content`` null, as vLLM answers it.

The markers are matched on the decoded text, not on token ids: the fixture's tokenizer spells them in ordinary
pieces, real checkpoints as added tokens that decoding keeps (they are not ``special``). While streaming, a tail that
may be the start of a marker is held back until the next text decides it (:class:`ReasoningSplitter`).
"""

from __future__ import annotations

THINK_START, THINK_END = "<think>", "</think>"

#: ``--reasoning-parser`` values (vLLM's name for these markers; its ``deepseek_r1`` parser uses the same)
PARSERS = ("qwen3",)


def starts_in_reasoning(prompt_text: str) -> bool:
    """Whether a generation after ``prompt_text`` (the rendered chat prompt) starts inside a ``<think>`` block: the
    prompt's last ``<think>`` comes after its last ``</think>``."""
    return prompt_text.rfind(THINK_START) > prompt_text.rfind(THINK_END)


def _held(text: str, marker: str) -> int:
    """Length of the longest proper suffix of ``text`` that is a prefix of ``marker`` (0 if none)."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


class ReasoningSplitter:
    """Splits one answer's text, given in pieces, into reasoning and content.

    ``feed(text)`` returns ``(reasoning, content)``, the new text of each that is decided (either may be ""); ``flush()``
    at the end returns what was held back. The concatenated reasoning and content are the answer without its
    markers; how the pieces were cut does not change them.

    Args:
        in_reasoning: the generation starts inside a block (:func:`starts_in_reasoning` of the prompt).
    """

    def __init__(self, in_reasoning: bool):
        self._state = "reasoning" if in_reasoning else "start"
        self._buf = ""
        #: whether any reasoning text or marker was seen (a whole answer's reasoning is null otherwise)
        self.saw_reasoning = in_reasoning

    def feed(self, text: str) -> tuple[str, str]:
        self._buf += text
        reasoning = content = ""
        while True:
            if self._state == "start":  # not in a block: does the output open one?
                lead = self._buf.lstrip()
                if lead.startswith(THINK_START):
                    self._buf, self._state, self.saw_reasoning = lead[len(THINK_START):], "reasoning", True
                    continue
                if THINK_START.startswith(lead):  # "", or a prefix of the marker: undecided
                    return reasoning, content
                self._state = "content"
            if self._state == "reasoning":
                end = self._buf.find(THINK_END)
                if end >= 0:
                    reasoning += self._buf[:end]
                    self._buf, self._state = self._buf[end + len(THINK_END):], "content"
                    continue
                keep = _held(self._buf, THINK_END)
                reasoning += self._buf[:len(self._buf) - keep]
                self._buf = self._buf[len(self._buf) - keep:]
                return reasoning, content
            content += self._buf  # "content": everything from here on
            self._buf = ""
            return reasoning, content

    def flush(self) -> tuple[str, str]:
        """The text held back at the end: reasoning when the answer ended inside a block, else content."""
        rest, self._buf = self._buf, ""
        return (rest, "") if self._state == "reasoning" else ("", rest)


def split_reasoning(text: str, in_reasoning: bool) -> tuple[str | None, str | None]:
    """``(reasoning, content)`` of a whole answer: ``(None, text)`` where it holds no block; else the block's
    text and what follows it, None where nothing does (the answer ended inside its block), as vLLM answers."""
    sp = ReasoningSplitter(in_reasoning)
    r1, c1 = sp.feed(text)
    r2, c2 = sp.flush()
    reasoning, content = r1 + r2, c1 + c2
    if not sp.saw_reasoning:
        return None, content
    return reasoning, content or None

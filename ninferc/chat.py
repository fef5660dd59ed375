"""Chat-template rendering: a conversation (OpenAI ``messages``) -> the prompt text the model was trained on.

The template is the checkpoint's own (``chat_template.jinja``, or ``chat_template`` in ``tokenizer_config.json``;
an artifact stores it), rendered the way HF transformers' ``apply_chat_template`` renders it: jinja2's
``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and ``lstrip_blocks`` and the ``loopcontrols`` extension,
a ``tojson`` filter, ``raise_exception`` and ``strftime_now`` globals, variables ``messages``,
``add_generation_prompt``, ``bos_token``, ``eos_token`` (and ``tools`` when given), plus the request's
``chat_template_kwargs`` (e.g. ``enable_thinking``). The sandbox refuses attribute access to Python internals, so
a template (an artifact is data) cannot reach the interpreter.
"""

from __future__ import annotations

import json
from datetime import datetime

from ninferc.errors import NinfercError

#: the end-of-turn marker of the family's ChatML format (Qwen); a template that writes it ends every turn with it
CHATML_END_OF_TURN = "<|im_end|>"
#: the template variables the renderer sets itself (HF's ``apply_chat_template``'s): never a caller's extra variable
RENDERER_VARIABLES = ("messages", "add_generation_prompt", "bos_token", "eos_token", "tools")


class ChatTemplateError(NinfercError):
    """The template is missing, does not compile, or raised while rendering (the message says which)."""


class ChatTemplate:
    """A compiled chat template.

    Args:
        source: the jinja source.
        bos_token, eos_token: the strings the template may reference.

    Raises:
        ChatTemplateError: the source does not compile (names the line).
    """

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = ""):
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise ChatTemplateError(f"the chat template refused the conversation: {message}")

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self.source, self.bos_token, self.eos_token = source, bos_token, eos_token
        try:
            self._tpl = env.from_string(source)
        except TemplateError as exc:
            raise ChatTemplateError(f"the chat template does not compile: {exc}") from None

    def render(self, messages: list[dict], *, add_generation_prompt: bool = True, tools=None, **kwargs) -> str:
        """The prompt text of ``messages`` (each ``{"role", "content"}``; content a string or a list of
        ``{"type": "text", "text"}`` parts); ``kwargs`` are extra template variables (e.g. ``enable_thinking``).

        Raises:
            ChatTemplateError: the template raised (its own ``raise_exception`` or a jinja error), naming why.
            TypeError: ``kwargs`` names a variable the renderer sets itself (:data:`RENDERER_VARIABLES`).
        """
        from jinja2 import TemplateError

        clash = [k for k in RENDERER_VARIABLES if k in kwargs]
        if clash:
            raise TypeError(f"{', '.join(clash)}: set by the renderer, not an extra template variable")
        ctx = dict(kwargs)
        ctx.update(messages=messages, add_generation_prompt=add_generation_prompt, bos_token=self.bos_token,
                   eos_token=self.eos_token)
        if tools is not None:
            ctx["tools"] = tools
        try:
            return self._tpl.render(**ctx)
        except ChatTemplateError:
            raise
        except (TemplateError, TypeError, ValueError, KeyError, AttributeError) as exc:
            raise ChatTemplateError(f"the chat template failed on this conversation: {type(exc).__name__}: {exc}") \
                from None


def chat_template_for(tokenizer) -> ChatTemplate | None:
    """The :class:`ChatTemplate` of ``tokenizer`` (:class:`ninferc.tokenizer.Tokenizer`), or None when the checkpoint
    has none. bos / eos strings come from ``tokenizer_config.json`` (``bos_token`` / ``eos_token``)."""
    if not tokenizer.chat_template:
        return None

    def tok_str(key):
        v = tokenizer.config.get(key)
        return v.get("content", "") if isinstance(v, dict) else (v or "")

    return ChatTemplate(tokenizer.chat_template, bos_token=tok_str("bos_token"), eos_token=tok_str("eos_token"))


def end_of_turn_ids(tokenizer) -> tuple[int, ...]:
    """Ids that end an assistant turn under the tokenizer's chat template: ``<|im_end|>`` when the template writes it
    and the tokenizer knows it as one token (the family's ChatML format); empty otherwise."""
    ct = tokenizer.chat_template or ""
    if CHATML_END_OF_TURN in ct:
        i = tokenizer.token_id(CHATML_END_OF_TURN)
        if i is not None:
            return (i,)
    return ()

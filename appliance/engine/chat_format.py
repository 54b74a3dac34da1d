"""Turning messages into a prompt string, per model.

Instruct models use the chat template stored in their GGUF file (applied by
llama.cpp's own template engine). Base models without a template, such as
the embedded Gemma 3 270M, get a plain transcript format of our own, with
stop strings so that they do not write the other speaker's lines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from appliance.engine.types import GenerationRequest, Message

PLAIN_LABELS = {"user": "User", "assistant": "Assistant"}


@dataclass(frozen=True)
class FormattedPrompt:
    """The prompt text plus stop strings that the format itself implies."""

    text: str
    stop: tuple[str, ...] = ()
    parse_special: bool = True


class PlainTranscriptFormat:
    """`System text`, then `User: ...` / `Assistant: ...` lines, ending on `Assistant:`."""

    stop = tuple(f"\n{label}:" for label in PLAIN_LABELS.values())

    def render(self, messages: Sequence[Message]) -> FormattedPrompt:
        parts: list[str] = []
        for message in messages:
            if message.role == "system":
                parts.append(message.content.strip() + "\n")
            else:
                parts.append(f"{PLAIN_LABELS[message.role]}: {message.content.strip()}")
        parts.append(f"{PLAIN_LABELS['assistant']}:")
        # Content may contain text that looks like control tokens; a base model has none.
        return FormattedPrompt(text="\n".join(parts), stop=self.stop, parse_special=False)


class GgufTemplateFormat:
    """The model's own chat template, applied by a callable supplied by the backend."""

    def __init__(self, apply: Callable[[Sequence[Message]], str]) -> None:
        self._apply = apply

    def render(self, messages: Sequence[Message]) -> FormattedPrompt:
        return FormattedPrompt(text=self._apply(messages), parse_special=True)


ChatFormatter = PlainTranscriptFormat | GgufTemplateFormat


def render_with_tokenizer(
    tokenizer: Any, use_template: bool, request: GenerationRequest
) -> tuple[str, tuple[str, ...]]:
    """Prompt text and stop strings for backends that hold a Hugging Face tokenizer."""
    if request.prompt is not None:
        return request.prompt, request.sampling.stop
    if use_template:
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        return str(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)), (
            request.sampling.stop
        )
    formatted = PlainTranscriptFormat().render(request.messages)
    return formatted.text, (*request.sampling.stop, *formatted.stop)

"""One line of an OpenAI-format batch file, validated: what Kalypso runs, or the line and
field it refuses.

A line is ``{"custom_id", "method": "POST", "url", "body"}`` (OpenAI's Batch API input
format, also read by ``vllm run-batch``). Two urls are supported:

* ``/v1/chat/completions``: ``body`` has ``model``, ``messages`` (roles ``system``,
  ``developer``, ``user``, ``assistant``; content a string or a list of ``{"type":
  "text", "text"}`` parts) and optionally ``max_tokens`` or ``max_completion_tokens``,
  ``temperature``, ``top_p``, ``seed``, ``stop``, ``n`` (1), ``logprobs`` (a boolean)
  and ``top_logprobs`` (0-20, with ``logprobs``);
* ``/v1/completions``: ``body`` has ``model``, ``prompt`` (one string) and optionally
  ``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop``, ``n`` (1) and
  ``logprobs`` (0-5 alternatives).

Any other field or value is refused with a :class:`LineError` naming the line (1-based)
and the field's path (``body.messages[2].role``); nothing is run for a file with one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

CHAT_URL = "/v1/chat/completions"
COMPLETIONS_URL = "/v1/completions"
MAX_STOP_STRINGS = 4
MAX_CUSTOM_ID_CHARS = 512


class LineError(ValueError):
    """A line Kalypso cannot run: its 1-based number, the field's path, and why."""

    def __init__(self, line: int, field: str, message: str) -> None:
        super().__init__(f"line {line}, {field}: {message}")
        self.line = line
        self.field = field
        self.message = message


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


Stop = str | Annotated[list[str], Field(max_length=MAX_STOP_STRINGS)] | None
Probability = Annotated[float, Field(ge=0.0, le=2.0)]


class _Sampling(_Strict):
    model: Annotated[str, Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Probability | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    seed: int | None = None
    stop: Stop = None
    n: Literal[1] | None = None

    @property
    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class ChatBody(_Sampling):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ChatBody:
        if self.max_tokens is not None and self.max_completion_tokens is not None:
            raise ValueError("give max_tokens or max_completion_tokens, not both")
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        return self


class CompletionBody(_Sampling):
    prompt: Annotated[str, Field(min_length=1)]
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None


class _Line(_Strict):
    custom_id: Annotated[str, Field(min_length=1, max_length=MAX_CUSTOM_ID_CHARS)]
    method: Literal["POST"]
    url: Literal["/v1/chat/completions", "/v1/completions"]
    body: dict[str, Any]


@dataclass(frozen=True)
class BatchRequest:
    """One validated request, as the front end lowers it.

    Attributes:
        line: its 1-based line number in the file.
        messages: ``(role, text)`` per message (chat), or ``(("prompt", text),)`` for a
            completion (no chat template).
        max_tokens: the request's cap, or None (then up to the model's context).
        logprobs: None, or how many alternatives to report per token (0: only the
            token's own logprob).
    """

    line: int
    custom_id: str
    url: str
    model: str
    messages: tuple[tuple[str, str], ...]
    max_tokens: int | None
    temperature: float
    top_p: float
    seed: int | None
    stop: tuple[str, ...]
    logprobs: int | None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def is_chat(self) -> bool:
        return self.url == CHAT_URL

    def body_key(self) -> tuple[Any, ...]:
        """Everything that decides the answer (equal keys of greedy requests: one answer)."""
        return (
            self.url,
            self.messages,
            self.max_tokens,
            self.temperature,
            None if self.greedy else (self.top_p, self.seed),
            self.stop,
            self.logprobs,
        )


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "none"})


def _path(loc: tuple[int | str, ...], prefix: str) -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in _TYPE_TAGS and "[" not in part:  # union members, not fields
            out += f".{part}" if out else str(part)
    return out or "(line)"


def _first_error(exc: ValidationError, line: int, prefix: str) -> LineError:
    error = exc.errors()[0]
    loc = tuple(error["loc"])
    message = str(error["msg"])
    if error["type"] == "extra_forbidden":
        message = "not supported by Kalypso's batch runner"
    return LineError(line, _path(loc, prefix), message)


def parse_line(text: str, line: int) -> BatchRequest:
    """The request on one line of a batch file.

    Raises:
        LineError: the line is not JSON, not an object, or has a field or value that
            is missing, unknown or unsupported.
    """
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LineError(line, "(line)", f"not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(raw, dict):
        raise LineError(line, "(line)", f"expected a JSON object, got {type(raw).__name__}")
    try:
        envelope = _Line.model_validate(raw)
    except ValidationError as exc:
        raise _first_error(exc, line, "") from None
    body: ChatBody | CompletionBody
    try:
        if envelope.url == CHAT_URL:
            body = ChatBody.model_validate(envelope.body)
        else:
            body = CompletionBody.model_validate(envelope.body)
    except ValidationError as exc:
        raise _first_error(exc, line, "body") from None
    messages: tuple[tuple[str, str], ...]
    if isinstance(body, ChatBody):
        messages = tuple((m.role, m.text) for m in body.messages)
        max_tokens = body.max_tokens or body.max_completion_tokens
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
    else:
        messages = (("prompt", body.prompt),)
        max_tokens = body.max_tokens
        logprobs = body.logprobs
    return BatchRequest(
        line=line,
        custom_id=envelope.custom_id,
        url=envelope.url,
        model=body.model,
        messages=messages,
        max_tokens=max_tokens,
        temperature=float(body.temperature if body.temperature is not None else 1.0),
        top_p=float(body.top_p if body.top_p is not None else 1.0),
        seed=body.seed,
        stop=body.stop_strings,
        logprobs=logprobs,
    )

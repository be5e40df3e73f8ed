"""Output lines in OpenAI's batch output format.

An answered line: ``{"id", "custom_id", "response": {"status_code": 200, "request_id",
"body"}, "error": null}`` with ``body`` a ``chat.completion`` or ``text_completion``
object (choices, finish reason, usage, logprobs when asked). A failed line (in the error
file): ``{"id", "custom_id", "response": null, "error": {"code", "message"}}``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from kalypso.batch.schema import BatchRequest
from kalypso.core.instance import CallOutcome
from kalypso.engine.protocol import Tokenizer


def _id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def _token(tokenizer: Tokenizer, token_id: int) -> str:
    return tokenizer.decode([token_id])


def _chat_logprobs(
    outcome: CallOutcome, top: int, tokenizer: Tokenizer
) -> dict[str, list[dict[str, Any]]]:
    content = []
    for token_id, (logprob, alternatives) in zip(
        outcome.output_token_ids, outcome.logprobs, strict=False
    ):
        text = _token(tokenizer, token_id)
        content.append(
            {
                "token": text,
                "logprob": logprob,
                "bytes": list(text.encode()),
                "top_logprobs": [
                    {
                        "token": (alt := _token(tokenizer, alt_id)),
                        "logprob": alt_logprob,
                        "bytes": list(alt.encode()),
                    }
                    for alt_id, alt_logprob in alternatives[:top]
                ],
            }
        )
    return {"content": content}


def _completion_logprobs(outcome: CallOutcome, top: int, tokenizer: Tokenizer) -> dict[str, Any]:
    tokens = [_token(tokenizer, t) for t in outcome.output_token_ids[: len(outcome.logprobs)]]
    offsets, at = [], 0
    for text in tokens:
        offsets.append(at)
        at += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": [logprob for logprob, _ in outcome.logprobs],
        "top_logprobs": (
            [{_token(tokenizer, t): lp for t, lp in alts[:top]} for _, alts in outcome.logprobs]
            if top
            else None
        ),
        "text_offset": offsets,
    }


def answered(request: BatchRequest, outcome: CallOutcome, tokenizer: Tokenizer) -> dict[str, Any]:
    """The output line of ``request`` answered by ``outcome``."""
    prompt_tokens = len(outcome.prompt_token_ids)
    completion_tokens = len(outcome.output_token_ids)
    logprobs = None
    choice: dict[str, Any]
    if request.is_chat:
        if request.logprobs is not None:
            logprobs = _chat_logprobs(outcome, request.logprobs, tokenizer)
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": outcome.text},
            "logprobs": logprobs,
            "finish_reason": outcome.finish_reason,
        }
        kind, prefix = "chat.completion", "chatcmpl-"
    else:
        if request.logprobs is not None:
            logprobs = _completion_logprobs(outcome, request.logprobs, tokenizer)
        choice = {
            "index": 0,
            "text": outcome.text,
            "logprobs": logprobs,
            "finish_reason": outcome.finish_reason,
        }
        kind, prefix = "text_completion", "cmpl-"
    body = {
        "id": _id(prefix),
        "object": kind,
        "created": int(time.time()),
        "model": request.model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    return {
        "id": _id("batch_req_"),
        "custom_id": request.custom_id,
        "response": {"status_code": 200, "request_id": _id("req_"), "body": body},
        "error": None,
    }


def failed(request: BatchRequest, code: str, message: str) -> dict[str, Any]:
    """The error line of ``request``."""
    return {
        "id": _id("batch_req_"),
        "custom_id": request.custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }

"""Lowering a chunk of batch requests to the core's task graphs.

Requests are grouped by *shape*: the url, the roles of their messages and their decoding
(cap, temperature, top_p, seed, stop strings, logprobs). A shape is one task graph with one
LLM node whose messages are slots, one instance per distinct request::

    input (m0, m1, ...) ---> request: [system: m0][user: m1] -> answer

* **Order.** Instances are keyed in the order of their prompts' exact token ids sorted
  lexicographically: the depth-first order of the radix tree over those tokens, so that
  requests sharing a prefix (a system prompt, a document asked several questions, few-shot
  examples) are admitted together while it is cached.
* **Same greedy body, one answer.** Greedy requests with equal bodies become one
  instance; every line gets its answer.
* **Too long.** A request whose prompt and cap exceed the model's context is not sent: it
  is answered with an error (``context_length_exceeded``).
* **No cap.** A request without ``max_tokens`` may generate up to the context left by the
  longest prompt of its shape; its reservation starts at :data:`FIRST_BOUND_TOKENS` and
  grows (continued calls), unless it asks for stop strings or logprobs (then the cap is
  reserved: a continuation would split them).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kalypso.batch.schema import BatchRequest
from kalypso.core.graph import InputNode, LLMNode, Message, Slot, TaskGraph
from kalypso.core.instance import Instance
from kalypso.core.prompt import ChatLayout, TokenIds
from kalypso.core.slots import ValueSlot
from kalypso.engine.protocol import Tokenizer

logger = logging.getLogger(__name__)

INPUT = "input"
NODE = "request"
FIRST_BOUND_TOKENS = 256
"""Where the reservation of a call without ``max_tokens`` starts."""


class RawLayout(ChatLayout):
    """No chat template: a completion's prompt is its text, tokenized as the completions
    API does (special-token strings become control ids)."""

    def boundaries(
        self, roles: tuple[str, ...], *, add_generation_prompt: bool = True
    ) -> tuple[TokenIds, ...]:
        return ((),) * (len(roles) + 1)


PREFIX_CHARS = (256, 1024, 4096, 16384)
"""Where :func:`prefix_key` cuts the last message: a key part per length."""


def prefix_key(request: BatchRequest) -> bytes:
    """A key that sorts requests sharing a prefix next to each other: 8-byte digests of
    the url and roles, of each message but the last (chained), and of the last message's
    first :data:`PREFIX_CHARS` characters. Equal prefixes give equal leading parts, so a
    sort groups requests by system prompt, then by the start of what follows (a few-shot
    block, a document). Used to form chunks; the order within a chunk is the tokens'."""

    def digest(data: str, chain: bytes) -> bytes:
        return hashlib.blake2b(
            chain + data.encode("utf-8", "surrogatepass"), digest_size=8
        ).digest()

    roles = ",".join(role for role, _ in request.messages)
    chain = digest(f"{request.url}|{roles}", b"")
    parts = [chain]
    for _, text in request.messages[:-1]:
        chain = digest(text, chain)
        parts.append(chain)
    last = request.messages[-1][1]
    for chars in PREFIX_CHARS:
        parts.append(digest(last[:chars], chain))
        if len(last) <= chars:
            break
    return b"".join(parts)


ShapeKey = tuple[Any, ...]


def shape_key(request: BatchRequest) -> ShapeKey:
    """What one task graph has in common: url, roles and decoding."""
    sampled = None if request.greedy else (request.temperature, request.top_p, request.seed)
    return (
        request.url,
        tuple(role for role, _ in request.messages),
        request.max_tokens,
        sampled,
        request.stop,
        request.logprobs,
    )


@dataclass
class Shape:
    """One task graph of a chunk: its node, its layout, its instances in radix order.
    (:func:`lower_shape` returns the lines refused as too long beside it.)

    ``lines_of[i]`` are the request lines instance ``i`` answers (one, or several equal
    greedy bodies)."""

    graph: TaskGraph
    layout: ChatLayout
    instances: list[Instance]
    lines_of: list[list[int]]


def layout_for(request: BatchRequest, tokenizer: Tokenizer) -> ChatLayout:
    return ChatLayout(tokenizer) if request.is_chat else RawLayout(tokenizer)


def _slot(request: BatchRequest, index: int) -> Slot:
    name = f"m{index}"
    return Slot(ValueSlot(name, as_template=not request.is_chat))


def prompt_ids(request: BatchRequest, instance: Instance, layout: ChatLayout) -> TokenIds:
    """``request``'s prompt as the core sends it (``instance`` holds its messages as
    ``m0``, ``m1``, ...: :func:`instance_of`)."""
    roles = tuple(role for role, _ in request.messages)
    bounds = layout.boundaries(roles)
    ids: list[int] = []
    for index, boundary in enumerate(bounds[:-1]):
        ids.extend(boundary)
        ids.extend(_slot(request, index).source.ids(instance, layout))
    ids.extend(bounds[-1])
    return tuple(ids)


def instance_of(request: BatchRequest) -> Instance:
    """An instance holding ``request``'s message texts as ``m0``, ``m1``, ..."""
    return Instance((0,), {f"m{i}": text for i, (_, text) in enumerate(request.messages)})


def lower_shape(
    requests: Sequence[BatchRequest],
    tokenizer: Tokenizer,
    max_model_len_tokens: int,
    layouts: dict[str, ChatLayout],
) -> tuple[Shape | None, list[tuple[int, str]]]:
    """The task graph of ``requests`` (all of one shape) and the lines refused as too long
    ``(line, message)``. None when every request is refused.

    ``layouts`` holds one layout per url, shared across shapes (it memoizes the chat
    template's boundaries).
    """
    first = requests[0]
    if first.url not in layouts:
        layouts[first.url] = layout_for(first, tokenizer)
    layout = layouts[first.url]
    distinct: dict[tuple[Any, ...], int] = {}
    prompts: list[tuple[TokenIds, Instance, list[int]]] = []
    refused: list[tuple[int, str]] = []
    for request in requests:
        key = request.body_key()
        if request.greedy and key in distinct:
            prompts[distinct[key]][2].append(request.line)
            continue
        instance = instance_of(request)
        ids = prompt_ids(request, instance, layout)
        need = len(ids) + (request.max_tokens or 1)
        if need > max_model_len_tokens:
            refused.append(
                (
                    request.line,
                    f"context_length_exceeded: {len(ids)} prompt tokens"
                    + (f" + max_tokens {request.max_tokens}" if request.max_tokens else "")
                    + f" > the model's {max_model_len_tokens}",
                )
            )
            continue
        if request.greedy:
            distinct[key] = len(prompts)
        prompts.append((ids, instance, [request.line]))
    if not prompts:
        return None, refused
    prompts.sort(key=lambda p: (p[0], p[2][0]))
    instances, lines_of = [], []
    for position, (_, instance, lines) in enumerate(prompts):
        instances.append(Instance((position,), instance.values, memo=instance.memo))
        lines_of.append(lines)
    longest = max(len(p[0]) for p in prompts)
    cap = first.max_tokens or max(1, max_model_len_tokens - longest)
    grows = first.max_tokens is None and not first.stop and first.logprobs is None
    node = LLMNode(
        node_id=NODE,
        messages=tuple(
            Message(role if first.is_chat else "user", (_slot(first, i),))
            for i, (role, _) in enumerate(first.messages)
        ),
        max_tokens=cap,
        op_id=NODE,
        first_bound_tokens=min(FIRST_BOUND_TOKENS, cap) if grows else None,
        greedy=first.greedy,
        temperature=first.temperature,
        top_p=first.top_p,
        seed=first.seed,
        stop=first.stop,
        logprobs=None if first.logprobs is None else max(1, first.logprobs),
        deps=(INPUT,),
        description=f"{first.url}, {len(first.messages)} message(s)",
    )
    names = tuple(f"m{i}" for i in range(len(first.messages)))
    graph = TaskGraph((InputNode(INPUT, names, "a request's messages"), node), name="batch")
    return Shape(graph, layout, instances, lines_of), refused

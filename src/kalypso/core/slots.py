"""Slot sources every front end can use: a value of the instance as text, and another
LLM node's output as the exact tokens it generated."""

from __future__ import annotations

from dataclasses import dataclass

from kalypso.core.instance import Instance
from kalypso.core.prompt import ChatLayout, TokenIds


@dataclass(frozen=True)
class ValueSlot:
    """``instance.values[name]`` as text, encoded as data (a special-token string in it
    stays text), or with ``as_template`` as template text (special-token strings become
    control ids, as a completions API reads a raw prompt). Memoized on the instance."""

    name: str
    as_template: bool = False

    def describe(self) -> str:
        return f"{'raw' if self.as_template else 'value'}({self.name})"

    def ready(self, instance: Instance) -> bool:
        return self.name in instance.values

    def ids(self, instance: Instance, layout: ChatLayout) -> TokenIds:
        memo_key = f"{'raw' if self.as_template else 'value'}:{self.name}"
        ids = instance.memo.get(memo_key)
        if ids is None:
            value = instance.values[self.name]
            text = "" if value is None else str(value)
            tokenizer = layout.tokenizer
            ids = tuple(
                tokenizer.encode_control(text) if self.as_template else tokenizer.encode(text)
            )
            instance.memo[memo_key] = ids
        return ids

    def partial_ids(self, instance: Instance, layout: ChatLayout) -> TokenIds:
        return self.ids(instance, layout) if self.ready(instance) else ()


@dataclass(frozen=True)
class OutputSlot:
    """The tokens LLM node ``node_id`` generated for the instance, exactly (no
    re-tokenization of its text), without a trailing end-of-sequence token: a prompt
    that puts them in an assistant turn extends that call's prompt and output token for
    token."""

    node_id: str

    def describe(self) -> str:
        return f"output({self.node_id})"

    def ready(self, instance: Instance) -> bool:
        return self.node_id in instance.outputs

    def ids(self, instance: Instance, layout: ChatLayout) -> TokenIds:
        ids = instance.outputs[self.node_id].output_token_ids
        eos = layout.tokenizer.eos_token_id
        if ids and eos is not None and ids[-1] == eos:
            ids = ids[:-1]
        return ids

    def partial_ids(self, instance: Instance, layout: ChatLayout) -> TokenIds:
        return self.ids(instance, layout) if self.ready(instance) else ()

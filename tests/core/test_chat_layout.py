"""Prompts are built from the model's own chat template (two template families on the
bundled tokenizer): boundaries come from the template, contents are data, and a tuple's
operators share its prefix token for token."""

from __future__ import annotations

import pytest

from kalypso.core.prompt import ChatLayout, ChatTemplateError, Prompt
from kalypso.engine.hf_tokenizer import HFTokenizer, load_hf_tokenizer
from kalypso.models import bundled_model_dir
from tests.engine.test_tokenizers import LLAMA3_TEMPLATE, NO_SYSTEM_TEMPLATE


def tokenizer(template: str | None = None) -> HFTokenizer:
    loaded = load_hf_tokenizer(str(bundled_model_dir()))
    if template is not None:
        loaded.hf.chat_template = template
    return loaded


CHATML = (
    "<|im_start|>system\n",
    "<|im_end|>\n<|im_start|>user\n",
    "<|im_end|>\n<|im_start|>assistant\n",
)
LLAMA3 = (
    "<|im_start|><|start_header_id|>system<|end_header_id|>\n\n",  # SmolLM2's bos, then Llama 3's
    "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n",
    "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
)


@pytest.mark.parametrize(("template", "expected"), [(None, CHATML), (LLAMA3_TEMPLATE, LLAMA3)])
def test_boundaries_come_from_the_models_template(
    template: str | None, expected: tuple[str, ...]
) -> None:
    layout = ChatLayout(tokenizer(template))
    hf = layout.tokenizer.hf  # type: ignore[attr-defined]
    bounds = layout.boundaries(("system", "user"))
    assert tuple(hf.decode(list(b)) for b in bounds) == expected
    # the boundaries are control tokens where the vocabulary has them (ChatML's are)
    if template is None:
        assert bounds[0][0] == hf.convert_tokens_to_ids("<|im_start|>")


def test_two_prompts_with_the_same_first_messages_share_them_token_for_token() -> None:
    layout = ChatLayout(tokenizer(LLAMA3_TEMPLATE))
    system, context = layout.text_ids("S"), layout.text_ids("[text]\nA long review.\n\n")
    first = Prompt(
        layout, [("system", [system]), ("user", [context, layout.text_ids("Is it red?")])]
    )
    second = Prompt(
        layout, [("system", [system]), ("user", [context, layout.text_ids("Why now?")])]
    )
    bounds = layout.boundaries(("system", "user"))
    shared = len(bounds[0]) + len(system) + len(bounds[1]) + len(context)
    assert first.ids[:shared] == second.ids[:shared]
    assert first.ids[shared] != second.ids[shared]
    assert layout.builds == 2


def test_a_template_without_a_system_role_folds_it_into_the_user_turn() -> None:
    layout = ChatLayout(tokenizer(NO_SYSTEM_TEMPLATE))
    bounds = layout.boundaries(("system", "user"))
    text = layout.tokenizer.decode(bounds[0] + bounds[1])
    assert "system" not in text  # no system turn: the system text opens the user turn


def test_a_template_that_drops_contents_is_refused() -> None:
    layout = ChatLayout(tokenizer("{% for m in messages %}{{ m['role'] }}{% endfor %}"))
    with pytest.raises(ChatTemplateError, match="unexpectedly"):
        layout.boundaries(("system", "user"))

"""The deterministic output model, the word tokenizer and the cost profiles."""

from __future__ import annotations

import pytest

from kalypso.engine.protocol import Tokenizer
from kalypso.engine.sim import PROFILES, CostProfile, SimOutputModel, WordTokenizer, get_profile
from kalypso.engine.sim.costs import CALIBRATION_NOTE
from kalypso.engine.sim.outputs import TAIL_TOKENS


def yes_no_prompts(tokenizer: WordTokenizer, count: int) -> list[list[int]]:
    return [tokenizer.encode(f"Is record {i} relevant? Answer yes or no.") for i in range(count)]


@pytest.mark.parametrize("yes_rate", [0.5, 0.2])
def test_yes_rate_over_400_prompts(yes_rate: float) -> None:
    tokenizer = WordTokenizer()
    model = SimOutputModel(yes_rate=yes_rate)
    answers = [
        model.complete(p, max_tokens=4, tokenizer=tokenizer).text
        for p in yes_no_prompts(tokenizer, 400)
    ]
    assert set(answers) == {"Yes", "No"}
    # binomial standard deviation is at most 0.025 at n=400: allow 3 of them
    assert abs(answers.count("Yes") / 400 - yes_rate) < 0.075


def test_answers_are_a_function_of_the_prompt_only() -> None:
    first, second = WordTokenizer(), WordTokenizer()
    model = SimOutputModel()
    a = [model.complete(p, max_tokens=4, tokenizer=first) for p in yes_no_prompts(first, 50)]
    b = [model.complete(p, max_tokens=4, tokenizer=second) for p in yes_no_prompts(second, 50)]
    assert a == b
    assert all(c.token_ids[-1] == first.eos_token_id and c.finish_reason == "stop" for c in a)


def test_marker_is_case_insensitive_and_searched_in_the_tail_only() -> None:
    tokenizer = WordTokenizer()
    model = SimOutputModel()
    shouted = model.complete(
        tokenizer.encode("Answer YES OR NO"), max_tokens=4, tokenizer=tokenizer
    )
    assert shouted.text in ("Yes", "No")
    buried = tokenizer.encode("Answer yes or no." + " filler" * TAIL_TOKENS)
    free_form = model.complete(buried, max_tokens=100, tokenizer=tokenizer)
    assert 8 <= len(free_form.text.split()) <= 48


def test_free_form_length_range_and_cut() -> None:
    tokenizer = WordTokenizer()
    model = SimOutputModel(min_output_tokens=3, max_output_tokens=5)
    lengths = {
        len(model.complete([i, i + 1], max_tokens=100, tokenizer=tokenizer).text.split())
        for i in range(100)
    }
    assert lengths == {3, 4, 5}
    cut = model.complete([1, 2], max_tokens=2, tokenizer=tokenizer)
    assert (len(cut.token_ids), cut.finish_reason) == (2, "length")


def test_output_model_validates_its_settings() -> None:
    with pytest.raises(ValueError, match="yes_rate"):
        SimOutputModel(yes_rate=1.5)
    with pytest.raises(ValueError, match="min_output_tokens"):
        SimOutputModel(min_output_tokens=10, max_output_tokens=5)


def test_word_tokenizer_round_trips_and_is_stable() -> None:
    text = "Hello,  world!\nIs this (really) 42?  "
    tokenizer = WordTokenizer()
    ids = tokenizer.encode(text)
    assert isinstance(tokenizer, Tokenizer)
    assert tokenizer.decode(ids) == text
    assert WordTokenizer().encode(text) == ids
    # "Hello" "," "  world" "!" "\nIs" " this" " (" "really" ")" " 42" "?" "  "
    assert len(ids) == 12
    assert all(16 <= i < 2**31 for i in ids)
    assert tokenizer.decode([*ids, tokenizer.eos_token_id]) == text
    assert WordTokenizer().decode([ids[0]]) == "<unk>"


def test_profiles() -> None:
    assert set(PROFILES) == {
        "smollm2-cpu",
        "smollm2-cpu-f32",
        "llama-3.3-70b-4xgpu",
        "qwen3-8b-h100",
        "llama-3.1-8b-h100",
    }
    smol = get_profile("smollm2-cpu")
    assert CALIBRATION_NOTE in smol.notes
    assert smol.step_time_s(prefill_tokens=600, decode_seqs=0) == pytest.approx(0.558)
    assert smol.step_time_s(prefill_tokens=0, decode_seqs=2) == pytest.approx(0.0318)
    llama = get_profile("llama-3.3-70b-4xgpu")
    assert llama.capacity.block_size_tokens == 16
    assert llama.capacity.total_tokens == 448_000
    qwen = get_profile("qwen3-8b-h100")
    assert qwen.capacity.total_tokens == 352_000
    assert qwen.step_time_s(prefill_tokens=0, decode_seqs=10) == pytest.approx(0.0075)
    measured = get_profile("llama-3.1-8b-h100")  # vLLM's benchmark on one H100: 256 sequences
    assert measured.step_time_s(prefill_tokens=0, decode_seqs=256) == pytest.approx(0.012632)
    assert measured.capacity.total_tokens == 422_400 and "a4f9f4371a1c" in measured.notes
    with pytest.raises(KeyError, match="known"):
        get_profile("nope")
    with pytest.raises(ValueError, match="costs"):
        CostProfile("bad", per_step_s=-1.0, per_prefill_token_s=0.0, per_decode_token_s=0.0)

"""The simulator's constrained decoding, logprobs, timeouts, per-phase times and chat
rendering (the engine protocol's newer parts)."""

from __future__ import annotations

import asyncio
import math

import pytest

from kalypso.engine.protocol import EngineTimeoutError, GenerateResult, Tokenizer
from kalypso.engine.sim import SimEngine, SimOutputModel, WordTokenizer
from tests.sim.factories import make_engine, make_request, run


def _yes_no(tokenizer: WordTokenizer) -> tuple[int, int]:
    return tokenizer.encode("Yes")[0], tokenizer.encode("No")[0]


def _question(tokenizer: WordTokenizer, i: int) -> list[int]:
    return tokenizer.encode(f"Is record {i} relevant? Answer yes or no.")


def test_constrained_decision_follows_yes_rate_and_the_unconstrained_answer() -> None:
    tokenizer = WordTokenizer()
    model = SimOutputModel(yes_rate=0.3)
    yes, no = _yes_no(tokenizer)
    constrained = [
        model.complete(
            _question(tokenizer, i),
            max_tokens=1,
            tokenizer=tokenizer,
            allowed_token_ids=(no, yes, 777),
        )
        for i in range(400)
    ]
    free = [
        model.complete(_question(tokenizer, i), max_tokens=4, tokenizer=tokenizer)
        for i in range(400)
    ]
    assert [c.token_ids for c in constrained] == [f.token_ids[:1] for f in free]
    assert all(c.finish_reason == "length" for c in constrained)
    share_yes = sum(c.token_ids == (yes,) for c in constrained) / 400
    assert abs(share_yes - 0.3) < 0.075  # 3 binomial standard deviations at n=400


def test_constrained_output_is_drawn_from_the_allowed_ids_only() -> None:
    tokenizer = WordTokenizer()
    model = SimOutputModel()
    allowed = (101, 202, 303, tokenizer.eos_token_id)
    outputs = [
        model.complete(
            [i, i + 1, i + 2], max_tokens=6, tokenizer=tokenizer, allowed_token_ids=allowed
        )
        for i in range(200)
    ]
    assert all(set(o.token_ids) <= set(allowed) for o in outputs)
    ended = [o for o in outputs if o.token_ids[-1] == tokenizer.eos_token_id]
    assert ended and all(o.finish_reason == "stop" for o in ended)
    assert all(len(o.token_ids) == 6 for o in outputs if o not in ended)
    again = model.complete([5, 6, 7], max_tokens=6, tokenizer=tokenizer, allowed_token_ids=allowed)
    assert again == outputs[5]
    # a yes/no answer under a constraint that allows end-of-sequence ends right after it
    yes, no = _yes_no(tokenizer)
    answer = model.complete(
        _question(tokenizer, 1),
        max_tokens=4,
        tokenizer=tokenizer,
        allowed_token_ids=(yes, no, tokenizer.eos_token_id),
    )
    assert answer.token_ids[1:] == (tokenizer.eos_token_id,) and answer.finish_reason == "stop"


def test_constrained_logprobs_are_renormalised_over_the_allowed_ids() -> None:
    tokenizer = WordTokenizer()
    model = SimOutputModel()
    yes, no = _yes_no(tokenizer)
    for i in range(50):
        completion = model.complete(
            _question(tokenizer, i),
            max_tokens=1,
            tokenizer=tokenizer,
            allowed_token_ids=(yes, no),
            logprobs=5,
        )
        (position,) = completion.logprobs
        assert {token for token, _ in position} == {yes, no}
        assert position[0][0] == completion.token_ids[0]
        assert math.fsum(math.exp(lp) for _, lp in position) == pytest.approx(1.0, abs=1e-12)
        margin = position[0][1] - position[1][1]
        assert 1.0 <= margin < 3.0  # [0.5, 1.5) x decision_margin_nats = 2.0


@pytest.mark.parametrize("near_tie_rate", [0.0, 0.3, 1.0])
def test_near_tie_rate_sets_the_share_of_small_margins(near_tie_rate: float) -> None:
    tokenizer = WordTokenizer()
    model = SimOutputModel(near_tie_rate=near_tie_rate, near_tie_margin_nats=0.01)
    yes, no = _yes_no(tokenizer)
    margins = []
    for i in range(400):
        completion = model.complete(
            _question(tokenizer, i),
            max_tokens=1,
            tokenizer=tokenizer,
            allowed_token_ids=(yes, no),
            logprobs=2,
        )
        (position,) = completion.logprobs
        margins.append(position[0][1] - position[1][1])
    near = [m for m in margins if m < 0.01]
    assert all(m >= 1.0 for m in margins if m >= 0.01)
    assert abs(len(near) / 400 - near_tie_rate) < 0.075


def test_unconstrained_logprobs_rank_the_generated_token_first() -> None:
    tokenizer = WordTokenizer()
    completion = SimOutputModel().complete(
        [1, 2, 3], max_tokens=10, tokenizer=tokenizer, ignore_eos=True, logprobs=3
    )
    assert len(completion.logprobs) == len(completion.token_ids) == 10
    for token, position in zip(completion.token_ids, completion.logprobs, strict=True):
        assert len(position) == 3
        assert position[0][0] == token
        assert [lp for _, lp in position] == sorted((lp for _, lp in position), reverse=True)
        assert math.fsum(math.exp(lp) for _, lp in position) < 1.0
    assert SimOutputModel().complete([1, 2, 3], max_tokens=10, tokenizer=tokenizer).logprobs == ()


def test_logprobs_reach_the_result_through_the_engine() -> None:
    async def scenario() -> tuple[GenerateResult, tuple[int, int]]:
        engine = make_engine(max_model_len_tokens=64)
        tokenizer = engine.tokenizer
        yes, no = tokenizer.encode("Yes")[0], tokenizer.encode("No")[0]
        prompt = tokenizer.encode("Is it red? Answer Yes or No.")
        request = make_request("q", prompt, 1, allowed_token_ids=(yes, no), logprobs=2)
        return await engine.generate(request), (yes, no)

    result, allowed = run(scenario())
    assert result.output_token_ids[0] in allowed
    assert next(t for t, _ in result.logprobs[0]) == result.output_token_ids[0]
    assert {t for t, _ in result.logprobs[0]} == set(allowed)


def test_request_held_out_by_pins_times_out_and_is_aborted() -> None:
    async def scenario() -> GenerateResult:
        engine = make_engine(num_blocks=8)
        await engine.generate(make_request("p", range(16), pin_key="k"))
        with pytest.raises(EngineTimeoutError, match="'big'"):
            await engine.generate(make_request("big", range(200, 220), timeout_s=0.05))
        stats = await engine.stats()
        assert (stats.waiting_requests, stats.running_requests) == (0, 0)
        assert engine.block_pool.num_pinned_blocks == 4
        await engine.unpin_all()
        return await engine.generate(make_request("after", range(200, 220)))

    assert run(scenario()).prompt_tokens == 20


def test_engine_default_timeout_applies_to_a_stalled_step_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> GenerateResult:
        engine = make_engine(default_timeout_s=0.05)
        with monkeypatch.context() as patch:
            patch.setattr(engine, "_step", lambda: None)  # the loop runs, nothing advances
            with pytest.raises(EngineTimeoutError, match="'stuck'"):
                await engine.generate(make_request("stuck", range(8), 2))
        stats = await engine.stats()
        assert (stats.waiting_requests, stats.running_requests) == (0, 0)
        assert stats.kv_usage_fraction == 0.0
        return await engine.generate(make_request("next", range(8), 2))

    assert run(scenario()).output_tokens == 2


def test_timeout_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="default_timeout_s"):
        SimEngine(default_timeout_s=0)
    with pytest.raises(ValueError, match="timeout_s"):
        make_request("r", [1, 2], timeout_s=0.0)


def test_stats_sum_virtual_prefill_and_decode_time() -> None:
    # the steps of test_virtual_clock_is_the_sum_of_step_costs: prefill (first scheduled to
    # first token) a 4.0 + b 7.75 + c 7.0; decode (first token to end) 3.75 + 3.25 + 1.25
    async def scenario() -> tuple[float, float]:
        engine = make_engine(max_num_batched_tokens=6)
        requests = [make_request(r, range(10 * k, 10 * k + 5), 2) for k, r in enumerate("abc")]
        await asyncio.gather(*(engine.generate(r) for r in requests))
        stats = await engine.stats()
        return stats.prefill_time_s, stats.decode_time_s

    assert run(scenario()) == (18.75, 8.25)


def test_word_tokenizer_renders_a_chatml_like_chat() -> None:
    tokenizer = WordTokenizer()
    assert isinstance(tokenizer, Tokenizer)
    messages = [("system", "Be brief."), ("user", "Is it red?")]
    rendered = tokenizer.render_chat(messages, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nIs it red?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert tokenizer.render_chat(messages, add_generation_prompt=False).endswith("<|im_end|>\n")
    assert tokenizer.encode_control(rendered) == tokenizer.encode(rendered)
    assert tokenizer.decode(tokenizer.encode(rendered)) == rendered
    assert tokenizer.eos_token_id not in tokenizer.encode(rendered)

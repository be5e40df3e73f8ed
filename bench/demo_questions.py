"""Which yes/no questions does a model answer well on the demo's reviews?

Runs each candidate filter over the 60 bundled reviews (one constrained token per
decision, in-process vLLM in the deterministic mode) and prints its agreement with the
bundled labels (``mentions_battery``, ``sentiment``)::

    python -m bench.demo_questions [--model bundled]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence

import kalypso
from kalypso.datasets.reviews import load_bundled
from kalypso.engine.open import EngineSpec, open_engine
from kalypso.engine.vllm_settings import VLLMSettings
from kalypso.models import cache_dir

SYSTEM_PROMPT = "You answer questions about product reviews."
CANDIDATES: tuple[tuple[str, bool, str], ...] = (
    ("battery", False, "Does this {text} talk about the battery?"),
    ("battery", False, "Does the {text} mention the battery or battery life?"),
    ("battery", True, "Is the battery never mentioned in the {text}?"),
    ("positive", False, "Is this {text} a positive review?"),
    ("positive", False, "Is the reviewer happy with the product in the {text}?"),
    ("positive", False, "Would the writer of the {text} recommend the product?"),
    ("positive", True, "Is this {text} a negative review?"),
)
"""(label, negate, question): ``label`` is ``battery`` or ``positive``."""


async def evaluate(model: str) -> None:
    reviews = load_bundled().reviews
    truth = {"battery": reviews["mentions_battery"], "positive": reviews["sentiment"] == "positive"}
    settings = VLLMSettings(
        model=model,
        kv_cache_bytes=256 * 2**20,
        block_size_tokens=32,
        max_num_seqs=16,
        deterministic=True,
    )
    log_path = cache_dir() / "logs" / "demo-questions-vllm.log"
    engine = await open_engine(EngineSpec(kind="vllm", settings=settings), log_path=log_path)
    try:
        for label, negate, question in CANDIDATES:
            started = time.monotonic()
            plan = kalypso.table(reviews[["review_id", "text"]]).sem_filter(question, negate=negate)
            result = await plan.arun(engine, system_prompt=SYSTEM_PROMPT)
            predicted = reviews["review_id"].isin(set(result.frame["review_id"]))
            agreement = float((predicted == truth[label]).mean())
            print(
                f"{label:9} negate={negate!s:5} agreement {agreement:.2f}"
                f"  kept {len(result.frame):2d}/{len(reviews)} (labelled {int(truth[label].sum())})"
                f"  {time.monotonic() - started:5.1f} s  {question}",
                flush=True,
            )
    finally:
        await engine.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="bundled")
    args = parser.parse_args(argv)
    asyncio.run(evaluate(args.model))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

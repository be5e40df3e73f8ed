"""A simulator that records every request it is sent and every result it returns."""

from __future__ import annotations

from kalypso.engine.protocol import GenerateRequest, GenerateResult
from kalypso.engine.sim import SimEngine, SimOutputModel

OUTPUTS = SimOutputModel(min_output_tokens=4, max_output_tokens=12)


class RecordingSim(SimEngine):
    """The simulator (256 blocks of 16 tokens, answers of 4 to 12 tokens unless given),
    recording ``requests`` in the order sent and ``results`` by request id."""

    def __init__(self, **kwargs: object) -> None:
        kwargs.setdefault("num_blocks", 256)
        kwargs.setdefault("block_size_tokens", 16)
        kwargs.setdefault("outputs", OUTPUTS)
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.requests: list[GenerateRequest] = []
        self.results: dict[str, GenerateResult] = {}

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.requests.append(request)
        result = await super().generate(request)
        self.results[request.request_id] = result
        return result

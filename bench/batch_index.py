"""What a large batch file costs Kalypso before any call: checking it and reading it back in
chunks, in time and resident memory (no engine).

    python -m bench.batch_index --lines 1000000

The file has ``lines`` chat requests of about 750 bytes, eight per document, in a random
order; it is written to a temporary directory and removed.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import tempfile
import time
from pathlib import Path

from kalypso.batch.reader import check_file
from kalypso.batch.run import CHUNK_REQUESTS


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_file(path: Path, lines: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(lines):
            document = rng.randrange(max(1, lines // 8))
            user = f"Document {document}: " + "lorem ipsum " * 40 + f" Question {i}?"
            body = {
                "model": "m",
                "messages": [
                    {"role": "system", "content": "You answer briefly."},
                    {"role": "user", "content": user},
                ],
                "max_tokens": 8,
                "temperature": 0,
            }
            line = {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions"}
            handle.write(json.dumps({**line, "body": body}) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--chunk-requests", type=int, default=CHUNK_REQUESTS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "batch.jsonl"
        write_file(path, args.lines)
        size_mb = path.stat().st_size / 1e6
        before = _max_rss_mib()
        started = time.monotonic()
        index = check_file(path)
        check_s = time.monotonic() - started
        indexed = _max_rss_mib()
        started = time.monotonic()
        count = sum(len(chunk) for chunk in index.chunks(args.chunk_requests))
        chunks_s = time.monotonic() - started
        assert count == args.lines
    print(
        f"{args.lines:,} lines, {size_mb:.0f} MB: checked in {check_s:.0f} s, read back in"
        f" chunks of {args.chunk_requests:,} in {chunks_s:.0f} s; max resident memory"
        f" {before:.0f} MiB before, {indexed:.0f} MiB after checking, {_max_rss_mib():.0f} MiB"
        " after reading back"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

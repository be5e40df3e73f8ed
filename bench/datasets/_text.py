"""Text-assembly helpers shared by the dataset generators.

Every helper takes an explicit :class:`random.Random`; nothing here touches the global
random state, so a generator seeded with the same value always produces the same text.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

TOKENS_PER_WORD = 1.33
"""Approximate Llama-3 tokens per whitespace-separated English word.

Used to turn the paper's "average tokens per tuple" (Table 2) into word targets.
"""

Pools = Mapping[str, Sequence[str]]
"""Slot name -> candidate values, used to fill ``{slot}`` fields of templates."""


def word_count(text: str) -> int:
    """Number of whitespace-separated words in ``text``."""
    return len(text.split())


def words_for_tokens(tokens: float) -> int:
    """Word target matching ``tokens`` Llama-3 tokens (see :data:`TOKENS_PER_WORD`)."""
    return round(tokens / TOKENS_PER_WORD)


def jittered(rng: random.Random, target: int, spread: float = 0.15) -> int:
    """A per-document length drawn uniformly from ``target * (1 ± spread)``.

    The mean over many documents is ``target``; ``spread`` must lie in ``[0, 1)``.
    """
    if not 0.0 <= spread < 1.0:
        raise ValueError(f"spread must be in [0, 1), got {spread}")
    return max(1, round(target * rng.uniform(1.0 - spread, 1.0 + spread)))


@lru_cache(maxsize=4096)
def _fields(template: str) -> tuple[str, ...]:
    return tuple(name for _, name, _, _ in string.Formatter().parse(template) if name)


def render(template: str, rng: random.Random, pools: Pools, **fixed: str) -> str:
    """Fill every ``{slot}`` of ``template``.

    A slot named in ``fixed`` takes that value; any other slot takes ``rng.choice`` of
    ``pools[slot]`` (a slot repeated in the template gets one value for all occurrences).
    The result starts with a capital letter, as templates are sentences.

    Raises:
        KeyError: a slot is neither fixed nor in ``pools``.
    """
    values: dict[str, str] = {}
    for name in _fields(template):
        if name in values:
            continue
        values[name] = fixed[name] if name in fixed else rng.choice(pools[name])
    return capitalize(template.format_map(values))


def capitalize(text: str) -> str:
    """``text`` with its first character upper-cased (the rest untouched)."""
    return text[:1].upper() + text[1:]


def indefinite_article(word: str) -> str:
    """``"an"`` before a word spoken with a leading vowel sound (including numbers such as
    8, 11, 18 and 80-89), otherwise ``"a"``."""
    if word[:1].isdigit():
        digits = word.split("-")[0]
        spoken_vowel = digits.startswith("8") or digits in ("11", "18")
        return "an" if spoken_vowel else "a"
    return "an" if word[:1].lower() in "aeiou" else "a"


def bernoulli_count(rng: random.Random, n: int, fraction: float) -> list[bool]:
    """A shuffled list of ``n`` flags of which exactly ``round(n * fraction)`` are true.

    Exact counts (rather than independent coin flips) keep small datasets on their
    selectivity target.

    Raises:
        ValueError: ``fraction`` is outside ``[0, 1]``.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    positives = round(n * fraction)
    flags = [True] * positives + [False] * (n - positives)
    rng.shuffle(flags)
    return flags


Filler = Callable[[random.Random], str | None]
"""Produces one more sentence for a section that must grow, or ``None`` when it has no
new sentence left to offer."""


def template_filler(
    rng: random.Random,
    templates: Sequence[str],
    pools: Pools,
    fixed: Mapping[str, str] | None = None,
    exclude: Sequence[str] = (),
) -> Filler:
    """A :data:`Filler` that renders ``templates`` in a random order, each at most once.

    Templates in ``exclude`` (typically those already used for required sentences) are
    skipped. Slots are filled from ``fixed`` first, then from ``pools``. The order is
    drawn from ``rng`` now; the slot values from the generator passed at each call.
    """
    order = [t for t in templates if t not in exclude]
    rng.shuffle(order)
    values = dict(fixed or {})

    def fill(r: random.Random) -> str | None:
        return render(order.pop(), r, pools, **values) if order else None

    return fill


@dataclass
class Section:
    """One part of a document being assembled.

    Attributes:
        heading: printed on its own line before the body, or ``None`` for no heading.
        sentences: the body, in order; the ones given up front are kept as they are.
        filler: makes an extra sentence when the document is short, or ``None`` if this
            section must not grow.
        weight: relative chance that this section receives the next filler sentence.
        append_only: new sentences go at the end (for text that must stay in order)
            rather than at a random position after the first sentence.
    """

    heading: str | None
    sentences: list[str] = field(default_factory=list)
    filler: Filler | None = None
    weight: float = 1.0
    append_only: bool = False

    def words(self) -> int:
        """Words in the heading and body."""
        head = word_count(self.heading) if self.heading else 0
        return head + sum(word_count(s) for s in self.sentences)

    def render(self) -> str:
        """Heading line (if any) then the body as one paragraph."""
        body = " ".join(self.sentences)
        return f"{self.heading}\n{body}" if self.heading else body


def grow_to(
    sections: Sequence[Section],
    target_words: int,
    rng: random.Random,
    *,
    tail: bool = False,
    overhead: int = 0,
) -> None:
    """Add filler sentences to ``sections`` until they hold at least ``target_words`` words.

    Each new sentence goes to a section drawn by weight among those whose filler still has
    sentences, at a random position after the section's first sentence (or at the end when
    ``tail`` is true or the section is ``append_only``), so required sentences keep their
    relative order. A sentence already
    in the document is redrawn once, and a section whose filler returns ``None`` or repeats
    itself stops growing. Stops early (leaving the document short) when no section can
    grow, so generators must provide pools large enough for their length targets.
    ``overhead`` counts the words the final rendering adds per sentence (e.g. 1 for a
    sentence number).
    """
    growable = [s for s in sections if s.filler is not None and s.weight > 0]
    seen = {sentence for s in sections for sentence in s.sentences}
    total = sum(s.words() + overhead * len(s.sentences) for s in sections)
    while total < target_words and growable:
        section = rng.choices(growable, [s.weight for s in growable])[0]
        assert section.filler is not None
        sentence = section.filler(rng)
        if sentence is not None and sentence in seen:
            sentence = section.filler(rng)
        if sentence is None or sentence in seen:
            growable.remove(section)
            continue
        seen.add(sentence)
        if tail or section.append_only or len(section.sentences) < 2:
            section.sentences.append(sentence)
        else:
            section.sentences.insert(rng.randint(1, len(section.sentences)), sentence)
        total += word_count(sentence) + overhead


def join_sections(sections: Sequence[Section], sep: str = "\n\n") -> str:
    """Render non-empty sections and join them with ``sep``."""
    return sep.join(s.render() for s in sections if s.sentences or s.heading)

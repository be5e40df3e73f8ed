"""Name pools for the FEVER-shaped world: fictional people, places, works and companies.

Names are built from syllables and word pools so that tens of thousands of distinct
entities can be made; :class:`NameBook` hands out unique names per kind.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Final

FIRST_NAMES: Final = (
    "Adrian",
    "Agnes",
    "Alma",
    "Anton",
    "Astrid",
    "Bianca",
    "Boris",
    "Camille",
    "Carlos",
    "Cecilia",
    "Clara",
    "Dario",
    "Dmitri",
    "Edith",
    "Elias",
    "Elena",
    "Emil",
    "Esther",
    "Farah",
    "Felix",
    "Freya",
    "Gideon",
    "Greta",
    "Hana",
    "Hector",
    "Helena",
    "Hugo",
    "Ines",
    "Ingrid",
    "Ivan",
    "Jonas",
    "Julia",
    "Kai",
    "Karin",
    "Kofi",
    "Lara",
    "Leon",
    "Lidia",
    "Lorenzo",
    "Lucia",
    "Magnus",
    "Malik",
    "Marta",
    "Mateo",
    "Mei",
    "Milan",
    "Mira",
    "Nadia",
    "Nikolai",
    "Nina",
    "Noah",
    "Olga",
    "Omar",
    "Oskar",
    "Paloma",
    "Pavel",
    "Petra",
    "Priya",
    "Rafael",
    "Rosa",
    "Ruben",
    "Sabine",
    "Samir",
    "Sara",
    "Sebastian",
    "Selma",
    "Simon",
    "Sofia",
    "Stefan",
    "Tariq",
    "Tessa",
    "Theo",
    "Tomas",
    "Ulla",
    "Valentina",
    "Victor",
    "Vera",
    "Walter",
    "Wilma",
    "Xavier",
    "Yara",
    "Yusuf",
    "Zora",
    "Aiden",
    "Beatrix",
    "Cyrus",
    "Dagny",
    "Elio",
    "Fiona",
    "Gustav",
    "Hilde",
    "Isak",
    "Jasper",
    "Kiran",
    "Linnea",
    "Marius",
    "Nora",
    "Otto",
    "Philippa",
    "Quentin",
    "Rhea",
    "Soren",
    "Talia",
    "Uriel",
    "Viggo",
    "Wanda",
    "Yannick",
    "Zelda",
    "Amara",
    "Bruno",
    "Cosima",
    "Desmond",
    "Elif",
    "Florian",
    "Gemma",
    "Henrik",
    "Ilse",
    "Jovan",
)
FEMALE: Final = frozenset(
    {
        "Agnes",
        "Alma",
        "Astrid",
        "Bianca",
        "Camille",
        "Cecilia",
        "Clara",
        "Edith",
        "Elena",
        "Esther",
        "Farah",
        "Freya",
        "Greta",
        "Hana",
        "Helena",
        "Ines",
        "Ingrid",
        "Julia",
        "Karin",
        "Lara",
        "Lidia",
        "Lucia",
        "Mei",
        "Mira",
        "Nadia",
        "Nina",
        "Olga",
        "Paloma",
        "Petra",
        "Priya",
        "Rosa",
        "Sabine",
        "Sara",
        "Selma",
        "Sofia",
        "Tessa",
        "Ulla",
        "Valentina",
        "Vera",
        "Wilma",
        "Yara",
        "Zora",
        "Beatrix",
        "Dagny",
        "Fiona",
        "Hilde",
        "Linnea",
        "Nora",
        "Philippa",
        "Rhea",
        "Talia",
        "Wanda",
        "Zelda",
        "Amara",
        "Cosima",
        "Elif",
        "Gemma",
        "Ilse",
    }
)

SURNAME_HEADS: Final = (
    "Al",
    "Bran",
    "Cor",
    "Dal",
    "El",
    "Fen",
    "Gar",
    "Hal",
    "Is",
    "Jor",
    "Kel",
    "Lin",
    "Mar",
    "Nor",
    "Or",
    "Pel",
    "Quin",
    "Ros",
    "Sal",
    "Tor",
    "Ul",
    "Val",
    "Wen",
    "Yar",
    "Zel",
    "Ash",
    "Bel",
    "Cal",
    "Dun",
    "Er",
    "Fal",
    "Gil",
    "Hart",
    "Ives",
    "Kes",
    "Lor",
    "Mor",
    "Nev",
    "Ost",
    "Pry",
)
SURNAME_TAILS: Final = (
    "ford",
    "wick",
    "man",
    "sen",
    "ley",
    "ton",
    "berg",
    "ard",
    "ino",
    "ova",
    "ez",
    "ski",
    "stead",
    "more",
    "well",
    "by",
    "dale",
    "vik",
    "son",
    "holm",
    "ier",
    "ani",
    "etti",
    "ov",
    "ens",
    "ridge",
    "worth",
    "croft",
    "lund",
    "ström",
)
PLACE_HEADS: Final = (
    "Bren",
    "Kell",
    "Ash",
    "Oak",
    "Stone",
    "Mill",
    "Thorn",
    "Wil",
    "Hay",
    "Lang",
    "Elder",
    "Ros",
    "Car",
    "Dun",
    "Fair",
    "Glen",
    "High",
    "Iron",
    "Kings",
    "Marl",
    "Nor",
    "Pen",
    "Red",
    "Salt",
    "Tarn",
    "Wester",
    "Amber",
    "Birch",
    "Cold",
    "Deer",
    "Elm",
    "Fox",
    "Gold",
    "Heath",
    "Ivy",
    "Lark",
    "Moss",
    "North",
    "Pine",
    "Raven",
    "Silver",
    "Swan",
    "Wolf",
    "Yew",
    "Alder",
    "Brook",
    "Clay",
    "Dove",
    "Fern",
    "Grey",
)
PLACE_TAILS: Final = (
    "mouth",
    "ford",
    "haven",
    "burg",
    "ville",
    "stad",
    "port",
    "field",
    "bridge",
    "minster",
    "dorf",
    "wick",
    "holm",
    "ton",
    "by",
    "caster",
    "mere",
    "gate",
    "keld",
    "vale",
)
PLACE_MODIFIERS: Final = (
    "",
    "",
    "",
    "New ",
    "Port ",
    "East ",
    "West ",
    "Upper ",
    "Lower ",
    "Saint ",
)
ADJECTIVES: Final = (
    "Silent",
    "Crimson",
    "Hidden",
    "Last",
    "Golden",
    "Broken",
    "Distant",
    "Winter",
    "Burning",
    "Quiet",
    "Lonely",
    "Hollow",
    "Wild",
    "Secret",
    "Northern",
    "Frozen",
    "Velvet",
    "Iron",
    "Paper",
    "Glass",
    "Electric",
    "Midnight",
    "Scarlet",
    "Endless",
    "Fading",
    "Restless",
    "Sunken",
    "Bitter",
    "Gentle",
    "Savage",
    "Forgotten",
    "Painted",
    "Wandering",
    "Shattered",
    "Emerald",
    "Pale",
    "Rising",
    "Falling",
    "Dark",
    "Bright",
)
NOUNS: Final = (
    "Harbor",
    "River",
    "Garden",
    "Mirror",
    "Kingdom",
    "Letter",
    "Station",
    "Orchard",
    "Lantern",
    "Horizon",
    "Island",
    "Voyage",
    "Tower",
    "Meadow",
    "Promise",
    "Echo",
    "Shadow",
    "Crown",
    "Compass",
    "Summer",
    "Storm",
    "Bridge",
    "Forest",
    "Desert",
    "Signal",
    "Machine",
    "Archive",
    "Canyon",
    "Circus",
    "Lighthouse",
    "Cathedral",
    "Frontier",
    "Season",
    "Heart",
    "Empire",
    "Tide",
    "Street",
    "Window",
    "Road",
    "Song",
)
BAND_NOUNS: Final = (
    "Wolves",
    "Lanterns",
    "Sparrows",
    "Engines",
    "Ghosts",
    "Rivers",
    "Comets",
    "Foxes",
    "Tigers",
    "Satellites",
    "Strangers",
    "Echoes",
    "Ravens",
    "Pilots",
    "Monarchs",
    "Owls",
)
NUMERALS: Final = ("II", "III", "IV", "V")


class NameBook:
    """Hands out names that are unique within one world.

    Each ``new_*`` method draws from the pools with the given generator; after repeated
    collisions it adds a disambiguating word (a middle initial, a place modifier, a sequel
    numeral) and, as a last resort, a number.
    """

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._used: set[str] = set()

    def _unique(self, draw: Callable[[], str], disambiguate: Callable[[str], str]) -> str:
        for _ in range(20):
            name = draw()
            if name not in self._used:
                break
        else:
            name = disambiguate(draw())
            serial = 2
            base = name
            while name in self._used:
                name = f"{base} {serial}"
                serial += 1
        self._used.add(name)
        return name

    def person(self) -> tuple[str, bool]:
        """A new person's full name and whether the first name is female."""
        r = self._rng
        first = r.choice(FIRST_NAMES)

        def draw() -> str:
            return f"{first} {r.choice(SURNAME_HEADS)}{r.choice(SURNAME_TAILS)}"

        def middle(name: str) -> str:
            given, family = name.split(" ", 1)
            return f"{given} {chr(r.randint(65, 90))}. {family}"

        return self._unique(draw, middle), first in FEMALE

    def place(self) -> str:
        r = self._rng

        def draw() -> str:
            mod = r.choice(PLACE_MODIFIERS)
            return f"{mod}{r.choice(PLACE_HEADS)}{r.choice(PLACE_TAILS)}"

        return self._unique(draw, lambda n: f"{n} {r.choice(('Heights', 'Falls', 'Bay'))}")

    def river(self) -> str:
        r = self._rng

        def draw() -> str:
            stem = f"{r.choice(PLACE_HEADS)}{r.choice(('a', 'e', 'en', 'ey', 'ing', 'water'))}"
            return r.choice((f"{stem} River", f"River {stem}"))

        return self._unique(draw, lambda n: f"Little {n}")

    def title(self) -> str:
        """A film or book title."""
        r = self._rng

        def draw() -> str:
            a, n, m = r.choice(ADJECTIVES), r.choice(NOUNS), r.choice(NOUNS)
            return r.choice(
                (
                    f"The {a} {n}",
                    f"{a} {n}",
                    f"The {n} of {m}s",
                    f"{n} of the {a} {m}",
                    f"A {n} for {r.choice(FIRST_NAMES)}",
                )
            )

        return self._unique(draw, lambda n: f"{n} {r.choice(NUMERALS)}")

    def band(self) -> str:
        r = self._rng

        def draw() -> str:
            return r.choice(
                (
                    f"The {r.choice(ADJECTIVES)} {r.choice(BAND_NOUNS)}",
                    f"{r.choice(NOUNS)} {r.choice(BAND_NOUNS)}",
                )
            )

        return self._unique(draw, lambda n: f"{n} Collective")

    def company(self, word: str) -> str:
        """A company name ending in ``word`` (its line of business, e.g. "Motors")."""
        r = self._rng

        def draw() -> str:
            family = f"{r.choice(SURNAME_HEADS)}{r.choice(SURNAME_TAILS)}"
            place = f"{r.choice(PLACE_HEADS)}{r.choice(PLACE_TAILS)}"
            return f"{r.choice((family, place))} {word}"

        return self._unique(draw, lambda n: f"{n} Group")

"""A fictional encyclopedic world for the FEVER-shaped workload.

:func:`build_world` makes people, cities, rivers, films, books, bands and companies with
facts and cross-links (a film's director is a person in the world whose article mentions
the film). :func:`passage` writes one Wikipedia-style introductory paragraph per entity.
Every fact that claims are made about (see :mod:`bench.datasets.fever`) is stated in the
subject's passage, and relational facts also in the linked entity's passage.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Final

from bench.datasets._fever_names import NameBook
from bench.datasets._text import (
    Section,
    grow_to,
    indefinite_article,
    jittered,
    render,
    template_filler,
)

COUNTRIES: Final = (
    ("France", "French"),
    ("Norway", "Norwegian"),
    ("Canada", "Canadian"),
    ("Brazil", "Brazilian"),
    ("Japan", "Japanese"),
    ("Kenya", "Kenyan"),
    ("Poland", "Polish"),
    ("Chile", "Chilean"),
    ("Portugal", "Portuguese"),
    ("India", "Indian"),
    ("Australia", "Australian"),
    ("Turkey", "Turkish"),
    ("Ireland", "Irish"),
    ("Mexico", "Mexican"),
    ("Sweden", "Swedish"),
    ("Egypt", "Egyptian"),
    ("Argentina", "Argentine"),
    ("Germany", "German"),
    ("Italy", "Italian"),
    ("Spain", "Spanish"),
    ("Ghana", "Ghanaian"),
    ("Vietnam", "Vietnamese"),
    ("the Netherlands", "Dutch"),
    ("Greece", "Greek"),
    ("Finland", "Finnish"),
)
SEAS: Final = (
    "North Sea",
    "Atlantic Ocean",
    "Baltic Sea",
    "Mediterranean Sea",
    "Pacific Ocean",
    "Indian Ocean",
    "Black Sea",
    "Caribbean Sea",
)
OCCUPATIONS: Final = (
    ("actor", 25),
    ("film director", 12),
    ("writer", 18),
    ("musician", 12),
    ("entrepreneur", 10),
    ("athlete", 8),
    ("politician", 7),
    ("scientist", 8),
)
FILM_GENRES: Final = (
    "drama",
    "comedy",
    "thriller",
    "science fiction",
    "horror",
    "western",
    "romantic comedy",
    "documentary",
    "crime",
    "musical",
)
BOOK_GENRES: Final = (
    "novel",
    "short story collection",
    "memoir",
    "poetry collection",
    "detective novel",
    "historical novel",
)
MUSIC_GENRES: Final = (
    "indie rock",
    "jazz",
    "folk",
    "electronic",
    "heavy metal",
    "pop",
    "punk rock",
    "blues",
)
INDUSTRIES: Final = {
    # industry -> the word company names in it end with
    "automotive": "Motors",
    "shipping": "Shipping",
    "textile": "Textiles",
    "mining": "Mining",
    "software": "Systems",
    "food": "Foods",
    "pharmaceutical": "Pharmaceuticals",
    "telecommunications": "Telecom",
    "brewing": "Brewing",
    "publishing": "Publishing",
    "airline": "Airlines",
    "steel": "Steel",
    "energy": "Energy",
    "electronics": "Electronics",
    "insurance": "Insurance",
}

KIND_SHARES: Final = (
    ("river", 5),
    ("city", 13),
    ("person", 40),
    ("film", 15),
    ("book", 12),
    ("band", 6),
    ("company", 9),
)


@dataclass
class Entity:
    """One encyclopedic subject.

    Attributes:
        eid: index in the world (also the passage id before shuffling).
        kind: one of the kinds of :data:`KIND_SHARES`.
        name: unique display name (the passage title).
        facts: attribute name -> value as it appears in text.
        links: relation -> ``eid`` of the related entity (``"director"``, ``"city"``...).
        works: reverse relations, ``(relation, eid)`` (``("directed", film_eid)``...).
        female: for people, whether to use feminine pronouns.
    """

    eid: int
    kind: str
    name: str
    facts: dict[str, str] = field(default_factory=dict)
    links: dict[str, int] = field(default_factory=dict)
    works: list[tuple[str, int]] = field(default_factory=list)
    female: bool = False


def _counts(n: int) -> dict[str, int]:
    """Entities per kind for a world of ``n`` entities (at least 2 of each kind)."""
    total = sum(share for _, share in KIND_SHARES)
    counts = {kind: max(2, n * share // total) for kind, share in KIND_SHARES}
    counts["person"] += max(0, n - sum(counts.values()))
    return counts


def build_world(n: int, rng: random.Random) -> list[Entity]:
    """A world of about ``n`` entities (exactly ``n`` when ``n >= 40``)."""
    counts = _counts(n)
    names = NameBook(rng)
    world: list[Entity] = []

    def add(kind: str, name: str, **facts: str) -> Entity:
        entity = Entity(len(world), kind, name, dict(facts))
        world.append(entity)
        return entity

    rivers = []
    for _ in range(counts["river"]):
        country = rng.choice(COUNTRIES)[0]
        rivers.append(
            add(
                "river",
                names.river(),
                country=country,
                length=str(rng.randrange(40, 1400, 5)),
                sea=rng.choice(SEAS),
            )
        )
    cities = []
    for _ in range(counts["city"]):
        river = rng.choice(rivers)
        country = river.facts["country"] if rng.random() < 0.8 else rng.choice(COUNTRIES)[0]
        city = add(
            "city",
            names.place(),
            country=country,
            founded=str(rng.randint(900, 1900)),
            population=f"{rng.randint(2, 900) * 1000 + rng.randint(0, 999):,}",
            size=rng.choice(("town", "city", "market town", "port city")),
        )
        city.links["river"] = river.eid
        river.works.append(("city", city.eid))
        cities.append(city)
    by_job: dict[str, list[Entity]] = {job: [] for job, _ in OCCUPATIONS}
    jobs, weights = zip(*OCCUPATIONS, strict=True)
    adjective = dict(COUNTRIES)
    for _ in range(counts["person"]):
        name, female = names.person()
        birthplace = rng.choice(cities)
        home = birthplace.facts["country"]
        nation = home if rng.random() < 0.85 else rng.choice(COUNTRIES)[0]
        job = rng.choices(jobs, weights)[0]
        person = add(
            "person",
            name,
            born=str(rng.randint(1920, 2000)),
            occupation=job,
            nationality=adjective[nation],
            birthplace=birthplace.name,
        )
        person.female = female
        person.links["birthplace"] = birthplace.eid
        by_job[job].append(person)
    people = [e for e in world if e.kind == "person"]

    def pick(job: str) -> Entity:
        return rng.choice(by_job[job] or people)

    def year_after(person: Entity, low: int = 20, high: int = 60) -> str:
        return str(min(2024, int(person.facts["born"]) + rng.randint(low, high)))

    for _ in range(counts["film"]):
        director, star = pick("film director"), pick("actor")
        film = add(
            "film",
            names.title(),
            year=year_after(director),
            genre=rng.choice(FILM_GENRES),
            director=director.name,
            star=star.name,
            country=adjective[rng.choice(COUNTRIES)[0]],
            location=rng.choice(cities).name,
        )
        film.links.update(director=director.eid, star=star.eid)
        director.works.append(("directed", film.eid))
        star.works.append(("starred", film.eid))
    for _ in range(counts["book"]):
        author = pick("writer")
        book = add(
            "book",
            names.title(),
            year=year_after(author),
            author=author.name,
            genre=rng.choice(BOOK_GENRES),
            language=rng.choice(COUNTRIES)[1],
        )
        book.links["author"] = author.eid
        author.works.append(("wrote", book.eid))
    for _ in range(counts["band"]):
        founder, origin = pick("musician"), rng.choice(cities)
        band = add(
            "band",
            names.band(),
            year=year_after(founder, 16, 35),
            city=origin.name,
            genre=rng.choice(MUSIC_GENRES),
            founder=founder.name,
            album=names.title(),
        )
        band.links.update(founder=founder.eid, city=origin.eid)
        founder.works.append(("formed", band.eid))
    for _ in range(counts["company"]):
        founder, hq = pick("entrepreneur"), rng.choice(cities)
        industry = rng.choice(sorted(INDUSTRIES))
        company = add(
            "company",
            names.company(INDUSTRIES[industry]),
            year=year_after(founder, 20, 45),
            founder=founder.name,
            city=hq.name,
            country=hq.facts["country"],
            industry=industry,
        )
        company.links.update(founder=founder.eid, city=hq.eid)
        founder.works.append(("founded", company.eid))
    return world


LEADS: Final[dict[str, tuple[str, ...]]] = {
    "person": (
        "{name} (born {born}) is {a_nationality} {occupation}.",
        "{name} (born {born}) is {a_nationality} {occupation} from {birthplace}.",
    ),
    "city": (
        "{name} is a {size} in {country}.",
        "{name} is a {size} in {country}, founded in {founded}.",
    ),
    "river": ("The {name} is a river in {country}.",),
    "film": (
        "{name} is a {year} {country} {genre} film directed by {director}.",
        "{name} is {a_country} {genre} film directed by {director} and released in {year}.",
    ),
    "book": ("{name} is a {year} {genre} by the writer {author}.",),
    "band": ("{name} are {a_genre} band formed in {city} in {year}.",),
    "company": ("{name} is {a_industry} company headquartered in {city}, {country}.",),
}
FACTS: Final[dict[str, tuple[str, ...]]] = {
    "person": ("{He} was born in {birthplace} in {born}.",),
    "city": (
        "It was founded in {founded} and lies on the {river}.",
        "As of the most recent census, it had a population of {population}.",
    ),
    "river": ("It is {length} kilometres long and flows into the {sea}.",),
    "film": ("The film stars {star} and was shot on location in {location}.",),
    "book": ("It was first published in {year} in the {language} language.",),
    "band": (
        "The band was founded by {founder}, and its debut album, {album}, followed two "
        "years later.",
    ),
    "company": ("It was founded in {year} by {founder}.",),
}
# relation -> (sentence for one related entity, sentence for several)
WORKS: Final[dict[str, tuple[str, str]]] = {
    "directed": ("{He} directed the film {titles}.", "{He} directed the films {titles}."),
    "starred": ("{He} starred in {titles}.", "{His} film roles include {titles}."),
    "wrote": ("{He} is the author of {titles}.", "{His} books include {titles}."),
    "formed": ("{He} founded the band {titles}.", "{He} founded the bands {titles}."),
    "founded": ("{He} founded the company {titles}.", "{He} founded the companies {titles}."),
    "city": ("The river flows through {titles}.", "Towns along its course include {titles}."),
}
FILLER: Final[dict[str, tuple[str, ...]]] = {
    "person": (
        "{He} has given interviews about {his} early years and influences.",
        "In {year2}, {he} moved to {other_city}, where {he} still lives.",
        "{He} is married to {other_person}.",
        "{He} was awarded an honorary doctorate in {year2}.",
        "Early in {his} career, {he} worked alongside {other_person}.",
        "A street in {other_city} was named after {him} in {year2}.",
        "{His} career has spanned several decades.",
        "{He} has received a number of national honours.",
        "Critics have described {his} work as thoughtful and understated.",
        "{He} has been involved in several charitable foundations.",
        "{He} studied at a university in {his} home country before starting {his} career.",
        "{He} has been the subject of a documentary about {his} life.",
        "{He} is known for avoiding publicity and rarely appears on television.",
        "{His} personal papers are held in a national archive.",
        "{He} has mentored a number of younger colleagues.",
    ),
    "city": (
        "The economy is based on trade, light industry and tourism.",
        "It is twinned with {other_city}.",
        "The cathedral in the town centre dates from the {century} century.",
        "The nearest larger city is {other_city}, about {number} kilometres away.",
        "Notable people from the town include {other_person}.",
        "The town was badly damaged by a fire in {year2} and later rebuilt.",
        "Its old town contains several buildings from the medieval period.",
        "The town hosts an annual summer festival.",
        "It is connected to the national railway network.",
        "The local football club plays in the regional league.",
        "A market has been held in the central square for centuries.",
        "The municipality includes several surrounding villages.",
    ),
    "river": (
        "Its basin supports agriculture and several protected wetlands.",
        "Its largest tributary joins it near {other_city}.",
        "A stone bridge built in the {century} century crosses it near {other_city}.",
        "The river's catchment covers about {number} square kilometres.",
        "It was first mapped in detail in {year2}.",
        "The river is navigable by small boats along its lower course.",
        "Several hydroelectric dams have been built on its tributaries.",
        "The river is popular with anglers and canoeists.",
        "Seasonal floods have shaped the surrounding landscape.",
    ),
    "film": (
        "The film received generally positive reviews from critics.",
        "The supporting cast includes {other_person}.",
        "It was produced by {other_person} on a budget of about {number} million.",
        "A remake was announced in {year2} but never completed.",
        "It was a modest success at the box office.",
        "The screenplay was adapted from an unpublished story.",
        "It premiered at an international film festival.",
        "The soundtrack features original music composed for the film.",
        "It was later restored and re-released on home video.",
        "The production took place over two years.",
    ),
    "book": (
        "The book was well received by critics.",
        "Much of the story is set in {other_city}.",
        "It is dedicated to {other_person}.",
        "A revised edition appeared in {year2}.",
        "The first edition had a print run of {number} thousand copies.",
        "It has been translated into several languages.",
        "The story follows a family across three generations.",
        "It was shortlisted for a national literary prize.",
        "The book was later adapted for radio.",
        "Its themes include memory, exile and belonging.",
    ),
    "band": (
        "The band has toured extensively across Europe and North America.",
        "The current line-up includes {other_person} on drums.",
        "In {year2} the band played a sold-out concert in {other_city}.",
        "The band's third album was recorded in {other_city}.",
        "Its line-up has changed several times over the years.",
        "The group is known for energetic live performances.",
        "The band has released several studio albums.",
        "Its music has appeared in films and television series.",
    ),
    "company": (
        "The company employs several thousand people.",
        "Its chief executive since {year2} has been {other_person}.",
        "It opened a second plant in {other_city} in {year2}.",
        "In {year2} it reported revenue of about {number} million.",
        "It operates facilities in several countries.",
        "The company is listed on the national stock exchange.",
        "It expanded rapidly during the following decades.",
        "The company has invested in research and development.",
        "It is one of the largest employers in the region.",
    ),
}


def names_by_kind(world: list[Entity]) -> dict[str, list[str]]:
    """Entity names grouped by kind (used to mention other entities in passages)."""
    groups: dict[str, list[str]] = {kind: [] for kind, _ in KIND_SHARES}
    for entity in world:
        groups[entity.kind].append(entity.name)
    return groups


def _others(rng: random.Random, names: list[str], exclude: str) -> tuple[str, ...]:
    """Up to three random names from ``names`` other than ``exclude``."""
    picked = {rng.choice(names) for _ in range(3)} - {exclude}
    return tuple(sorted(picked)) or tuple(n for n in names[:2] if n != exclude) or (exclude,)


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


def passage(
    entity: Entity,
    world: list[Entity],
    by_kind: dict[str, list[str]],
    rng: random.Random,
    target_words: int,
    spread: float,
) -> str:
    """The introductory paragraph of ``entity``'s article, about ``target_words`` long.

    Includes every claimable fact: attributes in the lead and fact sentences, and for each
    kind of ``entity.works`` a sentence naming all the related entities.
    ``by_kind`` is :func:`names_by_kind` of ``world``.
    """
    facts = entity.facts
    he, his, him = ("she", "her", "her") if entity.female else ("he", "his", "him")
    ctx = {
        "name": entity.name,
        "He": he.capitalize(),
        "he": he,
        "His": his.capitalize(),
        "his": his,
        "him": him,
        **facts,
    }
    for key in ("nationality", "country", "industry", "genre"):
        if key in facts:
            ctx[f"a_{key}"] = f"{indefinite_article(facts[key])} {facts[key]}"
    if "river" in entity.links:
        ctx["river"] = world[entity.links["river"]].name
    base = int(facts.get("born", facts.get("year", "1930"))) + 15
    pools: dict[str, tuple[str, ...]] = {
        "other_city": _others(rng, by_kind["city"], entity.name),
        "other_person": _others(rng, by_kind["person"], entity.name),
        "year2": tuple(str(y) for y in range(min(base, 2016), 2024)),
        "century": ("twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth"),
        "number": ("12", "25", "40", "65", "80", "120", "350"),
    }
    body = [render(rng.choice(LEADS[entity.kind]), rng, pools, **ctx)]
    body += [render(t, rng, pools, **ctx) for t in FACTS[entity.kind]]
    grouped: dict[str, list[str]] = {}
    for relation, eid in entity.works:
        other = world[eid]
        year = other.facts.get("year")
        grouped.setdefault(relation, []).append(f"{other.name} ({year})" if year else other.name)
    for relation, titles in grouped.items():
        one, several = WORKS[relation]
        template = one if len(titles) == 1 else several
        body.append(render(template, rng, pools, **ctx, titles=_join(titles)))
    section = Section(None, body, template_filler(rng, FILLER[entity.kind], pools, ctx))
    grow_to([section], jittered(rng, target_words, spread), rng)
    return section.render()

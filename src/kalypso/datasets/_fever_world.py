"""A fictional encyclopedic world for the FEVER-shaped workload.

:func:`build_world` makes people, cities, rivers, films, books, bands and companies with
facts and cross-links (a film's director is a person in the world whose article mentions
the film). :func:`passage` writes one Wikipedia-style introductory paragraph per entity.
Every fact that claims are made about (see :mod:`kalypso.datasets.fever`) is stated in the
subject's passage, and relational facts also in the linked entity's passage.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Final

from kalypso.datasets._fever_names import NameBook
from kalypso.datasets._text import Section, grow_to, jittered, render, template_filler

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
INDUSTRIES: Final = (
    "automotive",
    "shipping",
    "textile",
    "mining",
    "software",
    "food",
    "pharmaceutical",
    "telecommunications",
    "brewing",
    "publishing",
)

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
        company = add(
            "company",
            names.company(),
            year=year_after(founder, 20, 45),
            founder=founder.name,
            city=hq.name,
            country=hq.facts["country"],
            industry=rng.choice(INDUSTRIES),
        )
        company.links.update(founder=founder.eid, city=hq.eid)
        founder.works.append(("founded", company.eid))
    return world


LEADS: Final[dict[str, tuple[str, ...]]] = {
    "person": (
        "{name} (born {born}) is a {nationality} {occupation}.",
        "{name} (born {born}) is a {nationality} {occupation} from {birthplace}.",
    ),
    "city": (
        "{name} is a {size} in {country}.",
        "{name} is a {size} in {country}, founded in {founded}.",
    ),
    "river": ("The {name} is a river in {country}.",),
    "film": ("{name} is a {year} {country} {genre} film directed by {director}.",),
    "book": ("{name} is a {year} {genre} by the writer {author}.",),
    "band": ("{name} are a {genre} band formed in {city} in {year}.",),
    "company": ("{name} is a {industry} company headquartered in {city}, {country}.",),
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
WORKS: Final[dict[str, str]] = {
    "directed": "{He} directed the film {title} ({year}).",
    "starred": "{He} starred in {title} ({year}).",
    "wrote": "{He} is the author of {title} ({year}).",
    "formed": "{He} founded the band {title} in {year}.",
    "founded": "{He} founded the company {title} in {year}.",
    "city": "The river flows through {title}.",
}
FILLER: Final[dict[str, tuple[str, ...]]] = {
    "person": (
        "{He} has given interviews about {his} early years and influences.",
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
        "Its old town contains several buildings from the medieval period.",
        "The town hosts an annual summer festival.",
        "It is connected to the national railway network.",
        "The local football club plays in the regional league.",
        "A market has been held in the central square for centuries.",
        "The municipality includes several surrounding villages.",
    ),
    "river": (
        "Its basin supports agriculture and several protected wetlands.",
        "The river is navigable by small boats along its lower course.",
        "Several hydroelectric dams have been built on its tributaries.",
        "The river is popular with anglers and canoeists.",
        "Seasonal floods have shaped the surrounding landscape.",
    ),
    "film": (
        "The film received generally positive reviews from critics.",
        "It was a modest success at the box office.",
        "The screenplay was adapted from an unpublished story.",
        "It premiered at an international film festival.",
        "The soundtrack features original music composed for the film.",
        "It was later restored and re-released on home video.",
        "The production took place over two years.",
    ),
    "book": (
        "The book was well received by critics.",
        "It has been translated into several languages.",
        "The story follows a family across three generations.",
        "It was shortlisted for a national literary prize.",
        "The book was later adapted for radio.",
        "Its themes include memory, exile and belonging.",
    ),
    "band": (
        "The band has toured extensively across Europe and North America.",
        "Its line-up has changed several times over the years.",
        "The group is known for energetic live performances.",
        "The band has released several studio albums.",
        "Its music has appeared in films and television series.",
    ),
    "company": (
        "The company employs several thousand people.",
        "It operates facilities in several countries.",
        "The company is listed on the national stock exchange.",
        "It expanded rapidly during the following decades.",
        "The company has invested in research and development.",
        "It is one of the largest employers in the region.",
    ),
}


def passage(
    entity: Entity, world: list[Entity], rng: random.Random, target_words: int, spread: float
) -> str:
    """The introductory paragraph of ``entity``'s article, about ``target_words`` long.

    Includes every claimable fact: attributes in the lead and fact sentences, and for each
    of ``entity.works`` a sentence naming the related entity.
    """
    he, his = ("She", "her") if entity.female else ("He", "his")
    ctx = {"name": entity.name, "He": he, "he": he.lower(), "His": his.capitalize(),
           "his": his, **entity.facts}
    if "river" in entity.links:
        ctx["river"] = world[entity.links["river"]].name
    pools: dict[str, tuple[str, ...]] = {}
    body = [render(rng.choice(LEADS[entity.kind]), rng, pools, **ctx)]
    body += [render(t, rng, pools, **ctx) for t in FACTS[entity.kind]]
    for relation, eid in entity.works:
        other = world[eid]
        year = other.facts.get("year", "")
        body.append(render(WORKS[relation], rng, pools, **ctx, title=other.name, year=year))
    section = Section(None, body, template_filler(rng, FILLER[entity.kind], pools, ctx))
    grow_to([section], jittered(rng, target_words, spread), rng)
    return section.render()

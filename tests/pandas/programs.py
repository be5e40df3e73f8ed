"""Lotus-style programs, written from Lotus's documented examples, and the frames they
start from. Each program takes DataFrames and returns what the Lotus program would print
or use; the tests run them through :mod:`kalypso.pandas` on the simulator and on vLLM."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

COURSES = pd.DataFrame(
    {
        "Course Name": [
            "Probability and Random Processes",
            "Optimization Methods in Engineering",
            "Digital Design and Integrated Circuits",
            "Computer Security",
            "Cooking for Beginners",
            "History of Jazz",
        ]
    },
    index=[11, 12, 13, 14, 15, 16],
)
SKILLS = pd.DataFrame({"Skill": ["Math", "Computer Science", "Music"]})
ABSTRACTS = pd.DataFrame(
    {
        "title": ["Scaling LLMs", "Bee colonies", "Sparse attention", "Soil carbon"],
        "abstract": [
            "We train large language models on more data and find predictable scaling.",
            "Honey bee colonies regulate temperature through collective fanning.",
            "A sparse attention kernel makes transformer inference twice as fast.",
            "Soil stores carbon; tillage releases it, cover crops keep it.",
        ],
        "field": ["ml", "biology", "ml", "earth"],
    }
)
PRODUCTS = pd.DataFrame(
    {
        "description": [
            "The Acme kettle boils 1.7 litres and costs 39 dollars.",
            "A wool scarf in navy blue, 25 dollars, hand made in Wales.",
        ]
    }
)
CONTRACTS = pd.DataFrame(
    {
        "contract_id": ["c1", "c2", "c3"],
        "text": [
            "The Recipient shall keep all Confidential Information secret for five years.",
            "This lease covers the apartment at 4 Elm Street for twelve months.",
            "Each party may disclose Confidential Information to its lawyers only.",
        ],
    }
)
HYPOTHESES = pd.DataFrame(
    {
        "hypothesis": [
            "The agreement lets the recipient share information with advisors.",
            "Obligations last for a fixed number of years.",
        ]
    }
)

Program = Callable[[], Any]


def filter_courses() -> pd.DataFrame:
    return COURSES.sem_filter("{Course Name} requires a lot of math")


def filter_courses_all() -> pd.DataFrame:
    return COURSES.sem_filter(
        "{Course Name} requires a lot of math", return_all=True, return_explanations=True
    )


def map_courses() -> pd.DataFrame:
    return COURSES.sem_map("What is a similar course to {Course Name}? Be concise.", max_tokens=12)


def extract_products() -> pd.DataFrame:
    return PRODUCTS.sem_extract(
        ["description"], {"product": None, "price": "the price in dollars"}, extract_quotes=True
    )


def agg_abstracts() -> pd.DataFrame:
    return ABSTRACTS.sem_agg("Summarize the research in all the {abstract}", suffix="summary")


def agg_by_field() -> pd.DataFrame:
    return ABSTRACTS.sem_agg("Summarize the {abstract}", group_by=["field"])


def topk_courses() -> pd.DataFrame:
    return COURSES.sem_topk("Which {Course Name} requires the least math?", K=2)


def join_courses_skills() -> pd.DataFrame:
    return COURSES.sem_join(SKILLS, "Taking {Course Name:left} will help me learn {Skill:right}")


def sim_join_courses_skills() -> pd.DataFrame:
    return COURSES.sem_sim_join(SKILLS, left_on="Course Name", right_on="Skill", K=1)


def search_abstracts() -> pd.DataFrame:
    return ABSTRACTS.sem_search("abstract", "language models", K=2, return_scores=True)


def chain_filter_map_map() -> pd.DataFrame:
    return (
        ABSTRACTS.sem_filter("{abstract} is about machine learning")
        .sem_map("Summarize the {abstract} in five words.", suffix="summary", max_tokens=12)
        .sem_map("Name the method in the {abstract}.", suffix="method", max_tokens=8)
    )


def chain_contractnli() -> pd.DataFrame:
    return (
        CONTRACTS.sem_filter("This {text} is about confidentiality obligations")
        .sem_join(HYPOTHESES, "The contract {text} addresses: {hypothesis}")
        .sem_map(
            "Quote the clause of the {text} that addresses: {hypothesis}",
            suffix="evidence",
            max_tokens=12,
        )
    )


def chain_map_filter_topk() -> pd.DataFrame:
    return (
        ABSTRACTS.sem_map(
            "What is the main finding of the {abstract}?", suffix="finding", max_tokens=12
        )
        .sem_filter("The {finding} is a positive result")
        .sem_topk("Which {finding} is most surprising?", K=1)
    )


PROGRAMS: dict[str, tuple[Program, list[str]]] = {
    "filter": (filter_courses, ["Course Name"]),
    "filter-return-all": (filter_courses_all, ["Course Name", "_filter", "explanation_filter"]),
    "map": (map_courses, ["Course Name", "_map"]),
    "extract": (
        extract_products,
        ["description", "product", "product_quote", "price", "price_quote"],
    ),
    "agg": (agg_abstracts, ["summary"]),
    "agg-group-by": (agg_by_field, ["_output", "field"]),
    "topk": (topk_courses, ["Course Name"]),
    "join": (join_courses_skills, ["Course Name", "Skill"]),
    "sim-join": (sim_join_courses_skills, ["Course Name", "_scores", "Skill"]),
    "search": (search_abstracts, ["title", "abstract", "field", "vec_scores_sim_score"]),
    "chain-filter-map-map": (
        chain_filter_map_map,
        ["title", "abstract", "field", "summary", "method"],
    ),
    "chain-contractnli": (chain_contractnli, ["contract_id", "text", "hypothesis", "evidence"]),
    "chain-map-filter-topk": (chain_map_filter_topk, ["title", "abstract", "field", "finding"]),
}
"""Each program and the columns of the frame it gives (Lotus's names and order)."""

"""The Helium paper's evaluation workflows (section 7.1, Fig. 2; Trading, Fig. 6), reduced.

Each builder returns a :class:`Workload`: the workflow (or, for Trading, one per day),
its bundled inputs, and the expected answers where the data knows them. ``scale="small"``
runs in 1-3 minutes on the bundled model on 2 CPU cores; ``scale="paper"`` has the
paper's shape (agents, rounds, chunks, batch) for the simulator.

=========  ===================================================================
mapred     k experts answer (role last in the prompt), a summarizer reads them all
debate     3 agents answer, then each revises after reading the others (2 rounds)
reflect    an analyst, two critics, and the analyst's final answer (continued)
iterative  a summary refined chunk by chunk (a chain of 6)
parallel   experts extract from each chunk, summarize, a writer reports
trading    analysts -> bull/bear debate -> trader chains with a risk debate ->
           fund manager; day 1 warms the caches, day 2 is timed
=========  ===================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kalypso.workflow import dsl as wf
from kalypso.workflow.library.data import filings, market_days, review_chunks

EXPERT_SYSTEM = "You are a helpful AI assistant, roleplaying as an expert in your field."
ROLES = (
    "a financial analyst",
    "an accountant",
    "an economist",
    "a data scientist",
    "a statistician",
    "an auditor",
    "a portfolio manager",
)


@dataclass(frozen=True)
class Workload:
    name: str
    workflows: tuple[wf.Workflow, ...]
    """One per run (Trading: day 1, then day 2); the last one is the timed run."""
    inputs: tuple[Mapping[str, Sequence[str]], ...]
    expected: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Output name -> the exact answer per query, where the data knows it."""

    @property
    def queries(self) -> int:
        return len(next(iter(self.inputs[-1].values())))


@dataclass(frozen=True)
class Sizes:
    queries: int
    agents: int
    rounds: int = 2
    chunks: int = 3
    max_tokens: int = 32
    context_sentences: int = 10


SMALL = {
    "mapred": Sizes(queries=12, agents=4, max_tokens=24),
    "debate": Sizes(queries=8, agents=3, max_tokens=24),
    "reflect": Sizes(queries=12, agents=1, max_tokens=24),
    "iterative": Sizes(queries=6, agents=1, chunks=6, max_tokens=32),
    "parallel": Sizes(queries=4, agents=3, chunks=3, max_tokens=24),
    "trading": Sizes(queries=3, agents=2, max_tokens=24),
}
PAPER = {
    "mapred": Sizes(queries=600, agents=7, max_tokens=512, context_sentences=40),
    "debate": Sizes(queries=600, agents=3, max_tokens=512, context_sentences=40),
    "reflect": Sizes(queries=600, agents=1, max_tokens=512, context_sentences=40),
    "iterative": Sizes(queries=200, agents=1, chunks=6, max_tokens=512),
    "parallel": Sizes(queries=100, agents=7, chunks=6, max_tokens=512),
    "trading": Sizes(queries=100, agents=8, max_tokens=512),
}


@dataclass(frozen=True)
class QAData:
    """Questions over shared contexts and the agents' system prompt: what ``mapred`` and
    ``debate`` read in place of the bundled filings (the Helium paper's Figure 10 builds
    such data at given token lengths; ``bench.shapes``). No answers are known."""

    system: str
    context: tuple[str, ...]
    question: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.context or len(self.context) != len(self.question):
            raise ValueError(
                f"{len(self.context)} contexts for {len(self.question)} questions: one each"
            )

    def inputs(self) -> dict[str, list[str]]:
        return {"context": list(self.context), "question": list(self.question)}


def _qa_inputs(sizes: Sizes) -> tuple[dict[str, list[str]], list[str]]:
    per = 3
    docs = filings(-(-sizes.queries // per), per, sentences=sizes.context_sentences)
    contexts, questions, answers = [], [], []
    for doc in docs:
        for question, answer in zip(doc.questions, doc.answers, strict=True):
            contexts.append(doc.context)
            questions.append(question)
            answers.append(answer)
    q = sizes.queries
    return {"context": contexts[:q], "question": questions[:q]}, answers[:q]


def mapred(sizes: Sizes, data: QAData | None = None) -> Workload:
    """``sizes.agents`` experts and a summary; ``data`` replaces the bundled filings and
    the experts' system prompt."""
    context, question = wf.input("context"), wf.input("question")
    experts = [
        wf.llm(
            wf.chat(
                wf.system(EXPERT_SYSTEM if data is None else data.system),
                wf.user(
                    "Context: ",
                    context,
                    "\n\nQuestion: ",
                    question,
                    f"\n\nRespond as if you are {ROLES[i % len(ROLES)]}.",
                ),
            ),
            max_tokens=sizes.max_tokens,
            name=f"expert{i}",
        )
        for i in range(sizes.agents)
    ]
    summary = wf.llm(
        wf.chat(
            wf.system(
                "You are a helpful AI assistant specializing in summarizing answers"
                " from multiple experts."
            ),
            wf.user(
                "Combine the experts' answers into one final answer with the number.\n\n",
                "Context: ",
                context,
                "\n\nQuestion: ",
                question,
                *[wf.fmt("\n\nExpert {} answer: {}", str(i + 1), e) for i, e in enumerate(experts)],
            ),
        ),
        max_tokens=sizes.max_tokens,
        name="summary",
    )
    flow = wf.Workflow({"answer": summary}, name="mapred")
    if data is not None:
        return Workload("mapred", (flow,), (data.inputs(),))
    inputs, answers = _qa_inputs(sizes)
    return Workload("mapred", (flow,), (inputs,), {"answer": answers})


DEBATE_SYSTEM = "You are a helpful AI Assistant."
REVISE = (
    "Using the reasoning from other agents as additional advice, can you give an"
    " updated answer? Give the number first."
)


def debate(sizes: Sizes, data: QAData | None = None) -> Workload:
    """``sizes.agents`` agents debating ``sizes.rounds`` rounds; ``data`` replaces the
    bundled filings and the agents' system prompt."""
    context, question = wf.input("context"), wf.input("question")
    convs = [
        wf.chat(
            wf.system(DEBATE_SYSTEM if data is None else data.system),
            wf.user(
                "Context: ",
                context,
                "\n\nQuestion: ",
                question,
                f"\n\nRespond as if you are {ROLES[i]}.",
            ),
        )
        for i in range(sizes.agents)
    ]
    answers = [
        wf.llm(c, max_tokens=sizes.max_tokens, name=f"agent{i}_r0") for i, c in enumerate(convs)
    ]
    for r in range(1, sizes.rounds):
        revised = []
        for i, (conv, mine) in enumerate(zip(convs, answers, strict=True)):
            others = [a for j, a in enumerate(answers) if j != i]
            convs[i] = conv.then(mine).user(
                "These are the solutions to the problem from other agents:",
                *[wf.fmt("\n\nOne agent solution: {}", o) for o in others],
                "\n\n" + REVISE,
            )
            revised.append(wf.llm(convs[i], max_tokens=sizes.max_tokens, name=f"agent{i}_r{r}"))
        answers = revised
    flow = wf.Workflow({f"agent{i}": a for i, a in enumerate(answers)}, name="debate")
    if data is not None:
        return Workload("debate", (flow,), (data.inputs(),))
    inputs, truth = _qa_inputs(sizes)
    return Workload("debate", (flow,), (inputs,), {f"agent{i}": truth for i in range(sizes.agents)})


ANALYST = (
    "You are a financial analyst. Read the context, compute what the question asks"
    " and answer with the number and one sentence of reasoning."
)
EXTRACTION_CRITIC = (
    "You are a critic who checks that an analysis used the right figures"
    " from the context. Point out any figure that was misread."
)
CALCULATION_CRITIC = (
    "You are a critic who checks the arithmetic of an analysis. Point out"
    " any calculation that is wrong."
)


def reflect(sizes: Sizes, *, warm_critics: bool = False) -> Workload:
    """``warm_critics`` marks the critics ``cacheable``: each query's document and question,
    which they read before the analysis, are warmed before it exists (an experiment:
    ``bench.warm_bench``)."""
    context, question = wf.input("context"), wf.input("question")
    task = ("Context: ", context, "\n\nQuestion: ", question)
    analyst_chat = wf.chat(wf.system(ANALYST), wf.user(*task))
    analysis = wf.llm(analyst_chat, max_tokens=sizes.max_tokens, name="analyst")
    extraction = wf.llm(
        wf.chat(wf.system(EXTRACTION_CRITIC), wf.user(*task, "\n\nAnalysis: ", analysis)),
        max_tokens=sizes.max_tokens,
        name="extraction_critic",
        cacheable=warm_critics,
    )
    calculation = wf.llm(
        wf.chat(
            wf.system(CALCULATION_CRITIC),
            wf.user(*task, "\n\nAnalysis: ", analysis, "\n\nAnother critic: ", extraction),
        ),
        max_tokens=sizes.max_tokens,
        name="calculation_critic",
        cacheable=warm_critics,
    )
    final = wf.llm(
        analyst_chat.then(analysis).user(
            "Two critics reviewed your answer.\n\nFirst: ",
            extraction,
            "\n\nSecond: ",
            calculation,
            "\n\nGive your final answer, the number first.",
        ),
        max_tokens=sizes.max_tokens,
        name="final",
    )
    inputs, truth = _qa_inputs(sizes)
    return Workload(
        "reflect", (wf.Workflow({"answer": final}, name="reflect"),), (inputs,), {"answer": truth}
    )


REFINE_SYSTEM = "You are a helpful assistant."
FIRST = (
    "Summarize what customers say about this product in three sentences: what they"
    " like, what they dislike, and whether they recommend it."
)
NEXT = (
    "Here is the current summary of what customers say about this product, and more"
    " reviews. Refine the summary with the new reviews, in three sentences."
)


def iterative(sizes: Sizes) -> Workload:
    chunks = [wf.input(f"chunk{c}") for c in range(sizes.chunks)]
    summary = wf.llm(
        wf.chat(wf.system(REFINE_SYSTEM), wf.user(FIRST, "\n\nReviews:\n", chunks[0])),
        max_tokens=sizes.max_tokens,
        name="summary0",
    )
    for c in range(1, sizes.chunks):
        summary = wf.llm(
            wf.chat(
                wf.system(REFINE_SYSTEM),
                wf.user(NEXT, "\n\nCurrent summary: ", summary, "\n\nNew reviews:\n", chunks[c]),
            ),
            max_tokens=sizes.max_tokens,
            name=f"summary{c}",
        )
    products = review_chunks(sizes.queries, sizes.chunks)
    inputs = {f"chunk{c}": [parts[c] for _, parts in products] for c in range(sizes.chunks)}
    return Workload("iterative", (wf.Workflow({"summary": summary}, name="iterative"),), (inputs,))


EXPERTS = (
    ("a product designer", "You judge how well a product is built and how it looks and feels."),
    ("a customer support lead", "You look for problems customers had and how they were handled."),
    ("a market analyst", "You judge value for money against competing products."),
    ("a battery engineer", "You care about battery life and charging above everything."),
    ("a sound engineer", "You care about audio quality and noise."),
    ("a display specialist", "You care about screens, brightness and colour."),
    ("a reliability engineer", "You care about failures, returns and durability."),
)


def parallel(sizes: Sizes) -> Workload:
    product = wf.input("product")
    chunks = [wf.input(f"chunk{c}") for c in range(sizes.chunks)]
    summaries = []
    for e in range(sizes.agents):
        role, focus = EXPERTS[e % len(EXPERTS)]
        system = wf.system(f"You are {role}. {focus} Be concise and specific.")
        notes = [
            wf.llm(
                wf.chat(
                    system,
                    wf.user(
                        "List the two most important points these reviews"
                        " make for your expertise.\n\nProduct: ",
                        product,
                        "\n\nReviews:\n",
                        chunk,
                    ),
                ),
                max_tokens=sizes.max_tokens,
                name=f"expert{e}_chunk{c}",
            )
            for c, chunk in enumerate(chunks)
        ]
        summaries.append(
            wf.llm(
                wf.chat(
                    system,
                    wf.user(
                        "Summarize your notes in two sentences.\n\nProduct: ",
                        product,
                        *[wf.fmt("\n\nNotes {}: {}", str(i + 1), n) for i, n in enumerate(notes)],
                    ),
                ),
                max_tokens=sizes.max_tokens,
                name=f"expert{e}_summary",
            )
        )
    report = wf.llm(
        wf.chat(
            wf.system("You are a report writer."),
            wf.user(
                "Write a short report on the product from the experts' insights.\n\nProduct: ",
                product,
                *[wf.fmt("\n\nInsight: {}", s) for s in summaries],
            ),
        ),
        max_tokens=sizes.max_tokens,
        name="report",
    )
    products = review_chunks(sizes.queries, sizes.chunks)
    inputs: dict[str, list[str]] = {"product": [name for name, _ in products]}
    for c in range(sizes.chunks):
        inputs[f"chunk{c}"] = [parts[c] for _, parts in products]
    return Workload("parallel", (wf.Workflow({"report": report}, name="parallel"),), (inputs,))


def _trading_day(sizes: Sizes, day: int) -> tuple[wf.Workflow, dict[str, list[str]]]:
    stock = wf.input("stock")
    fundamentals, prices, social = wf.input("fundamentals"), wf.input("prices"), wf.input("social")
    news = [wf.input(f"news{k}") for k in range(2)]

    def analyst(name: str, role: str, docs: Sequence[wf.Value]) -> wf.LLM:
        system = wf.system(f"You are a {role} analyst covering listed companies.")
        notes = [
            wf.llm(
                wf.chat(
                    system,
                    wf.user(
                        "Extract the facts that matter for the stock ",
                        stock,
                        ".\n\nDocument:\n",
                        doc,
                    ),
                ),
                max_tokens=sizes.max_tokens,
                name=f"{name}_doc{k}",
            )
            for k, doc in enumerate(docs)
        ]
        return wf.llm(
            wf.chat(
                system,
                wf.user(
                    "Write a short report on ",
                    stock,
                    " from your notes.",
                    *[wf.fmt("\n\nNote: {}", n) for n in notes],
                ),
            ),
            max_tokens=sizes.max_tokens,
            name=f"{name}_report",
        )

    reports = [
        analyst("fundamentals", "fundamentals", [fundamentals]),
        analyst("market", "market", [prices]),
        analyst("news", "news", news),
        analyst("social", "social media", [social]),
    ]
    report_text = [wf.fmt("\n\nReport: {}", r) for r in reports]
    bull_chat = wf.chat(
        wf.system("You argue for buying the stock."), wf.user("Analyze ", stock, ".", *report_text)
    )
    bear_chat = wf.chat(
        wf.system("You argue against buying the stock."),
        wf.user("Analyze ", stock, ".", *report_text),
    )
    bull = wf.llm(bull_chat, max_tokens=sizes.max_tokens, name="bull_r0")
    bear = wf.llm(bear_chat, max_tokens=sizes.max_tokens, name="bear_r0")
    bull2 = wf.llm(
        bull_chat.then(bull).user("The bear says: ", bear, "\n\nAnswer the bear."),
        max_tokens=sizes.max_tokens,
        name="bull_r1",
    )
    bear2 = wf.llm(
        bear_chat.then(bear).user("The bull says: ", bull, "\n\nAnswer the bull."),
        max_tokens=sizes.max_tokens,
        name="bear_r1",
    )
    debate_text = wf.fn(
        lambda a, b, c, d: f"Bull: {a}\nBear: {b}\nBull: {c}\nBear: {d}",
        bull,
        bear,
        bull2,
        bear2,
        name="debate_text",
    )
    plan = wf.llm(
        wf.chat(
            wf.system("You are the research manager."),
            wf.user("Decide an investment plan for ", stock, " from the debate.\n\n", debate_text),
        ),
        max_tokens=sizes.max_tokens,
        name="research_manager",
    )
    decisions = []
    styles = ("a value trader", "a momentum trader", "a value trader", "a momentum trader")
    for t in range(sizes.agents):
        style = styles[t % len(styles)]
        trade = wf.llm(
            wf.chat(
                wf.system(f"You are {style}."),
                wf.user(
                    "Stock: ",
                    stock,
                    "\n\nInvestment plan: ",
                    plan,
                    "\n\nDecide: buy, hold or sell, with one reason.",
                ),
            ),
            max_tokens=sizes.max_tokens,
            name=f"trader{t}",
        )
        risk = []
        for who in ("risky", "safe", "neutral"):
            risk_chat = wf.chat(
                wf.system(f"You are the {who} risk analyst."),
                wf.user("Stock: ", stock, *report_text, "\n\nTrader decision: ", trade),
            )
            first = wf.llm(risk_chat, max_tokens=sizes.max_tokens, name=f"trader{t}_{who}_r0")
            risk.append((risk_chat, first))
        second = [
            wf.llm(
                chat_.then(first).user(
                    "The other analysts said:",
                    *[wf.fmt("\n\n{}", o) for _, o in risk if o is not first],
                    "\n\nGive your final view.",
                ),
                max_tokens=sizes.max_tokens,
                name=f"trader{t}_{who}_r1",
            )
            for (chat_, first), who in zip(risk, ("risky", "safe", "neutral"), strict=True)
        ]
        judge = wf.llm(
            wf.chat(
                wf.system("You are the risk judge."),
                wf.user(
                    "Stock: ",
                    stock,
                    "\n\nTrader decision: ",
                    trade,
                    *[wf.fmt("\n\nView: {}", v) for v in second],
                    "\n\nApprove or reject the decision.",
                ),
            ),
            max_tokens=sizes.max_tokens,
            name=f"trader{t}_judge",
        )
        decisions.append(judge)
    manager = wf.llm(
        wf.chat(
            wf.system("You are the fund manager."),
            wf.user(
                "Stock: ",
                stock,
                *[wf.fmt("\n\nRecommendation: {}", d) for d in decisions],
                "\n\nFinal decision: buy, hold or sell.",
            ),
        ),
        max_tokens=sizes.max_tokens,
        name="fund_manager",
    )
    days = market_days(sizes.queries, day)
    inputs = {
        "stock": [d.stock for d in days],
        "fundamentals": [d.fundamentals for d in days],
        "prices": [d.prices for d in days],
        "social": [d.social for d in days],
        **{f"news{k}": [d.news[k] for d in days] for k in range(2)},
    }
    return wf.Workflow({"decision": manager}, name=f"trading-day{day}"), inputs


def trading(sizes: Sizes) -> Workload:
    day1, inputs1 = _trading_day(sizes, 1)
    day2, inputs2 = _trading_day(sizes, 2)
    return Workload("trading", (day1, day2), (inputs1, inputs2))


BUILDERS: dict[str, Callable[[Sizes], Workload]] = {
    "mapred": mapred,
    "debate": debate,
    "reflect": reflect,
    "iterative": iterative,
    "parallel": parallel,
    "trading": trading,
}


def workload(name: str, scale: str = "small") -> Workload:
    """The workflow ``name`` at ``scale`` ("small" for CPU, "paper" for the simulator)."""
    sizes = {"small": SMALL, "paper": PAPER}.get(scale)
    if sizes is None or name not in BUILDERS:
        raise KeyError(
            f"unknown workflow {name!r} or scale {scale!r}; workflows: {sorted(BUILDERS)}"
        )
    return BUILDERS[name](sizes[name])

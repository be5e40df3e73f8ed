"""Small workflows the tests share: a debate, and a call that reads a document beside an
earlier call's answer."""

from __future__ import annotations

from kalypso import workflow as wf


def debate(rounds: int = 2) -> wf.Workflow:
    question = wf.input("question")
    convs = [
        wf.chat(
            wf.system("You are a helpful assistant."), wf.user(question, f" Answer as agent {i}.")
        )
        for i in range(3)
    ]
    answers = [wf.llm(c, max_tokens=8, name=f"a{i}_r0") for i, c in enumerate(convs)]
    for r in range(1, rounds):
        nxt = []
        for i, (conv, mine) in enumerate(zip(convs, answers, strict=True)):
            others = [a for j, a in enumerate(answers) if j != i]
            convs[i] = conv.then(mine).user("Others said:", *[wf.fmt(" {}", o) for o in others])
            nxt.append(wf.llm(convs[i], max_tokens=8, name=f"a{i}_r{r}"))
        answers = nxt
    return wf.Workflow({f"agent{i}": a for i, a in enumerate(answers)}, name="debate")


def read_then_answer(*, cacheable: bool) -> wf.Workflow:
    """``answer`` starts with the query's document, then reads ``brief``'s answer: its
    document is known from the start, before it can run."""
    doc, question = wf.input("doc"), wf.input("question")
    brief = wf.llm(wf.chat(wf.user("Rephrase: ", question)), max_tokens=8, name="brief")
    answer = wf.llm(
        wf.chat(wf.system("Answer from the filing."), wf.user(doc, "\n\nQuestion: ", brief)),
        max_tokens=8,
        name="answer",
        cacheable=cacheable,
    )
    return wf.Workflow({"answer": answer}, name="read")

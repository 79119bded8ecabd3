"""A LangGraph agent whose long-term memory is pymem (runnable without a model).

    pip install '.[langgraph]'                # from a clone of pymem (the package is not on PyPI)
    python examples/langgraph_agent.py        # PYMEM_DSN, or the embedded server

The graph has two nodes. ``remember`` stores what the user says about themselves ("I ...")
in the store, under ("memories", <user>); ``answer`` searches the user's memories by meaning
for the message and answers with the closest one: the part a chat model would play, written
as a rule so that the example needs no model. The store is pymem's PymemStore, so the
memories outlive the process and any app server sees them.
"""

from __future__ import annotations

import uuid
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

import pymem
from pymem.integrations.langgraph import PymemStore


class State(TypedDict, total=False):
    message: str
    reply: str


class Context(TypedDict):
    user: str


def remember(state: State, runtime: Runtime[Context]) -> State:
    text = state["message"]
    if text.startswith("I "):
        runtime.store.put(("memories", runtime.context["user"]), str(uuid.uuid4()), {"text": text})
    return {}


def answer(state: State, runtime: Runtime[Context]) -> State:
    found = runtime.store.search(("memories", runtime.context["user"]), query=state["message"], limit=1)
    if not found:
        return {"reply": "I don't know anything about you yet."}
    return {"reply": f"You told me: {found[0].value['text']}"}


def build(store: PymemStore):
    graph = StateGraph(State, context_schema=Context)
    graph.add_node("remember", remember)
    graph.add_node("answer", answer)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "answer")
    graph.add_edge("answer", END)
    return graph.compile(store=store)


def main(project_id: str = "pymem-langgraph-example") -> list[str]:
    replies = []
    embedder = pymem.HashEmbedder()  # a real model in practice, e.g. pymem.embedders.OnnxMiniLMEmbedder()
    index = {"embed": embedder, "dims": embedder.dimension, "fields": ["text"]}
    with PymemStore(project_id=project_id, index=index) as store:
        for ns in store.list_namespaces(prefix=("memories",)):  # start clean: a demo project
            for item in store.search(ns, limit=100):
                store.delete(item.namespace, item.key)
        agent = build(store)
        for user, message in [("alice", "I live in Bergen"), ("alice", "I keep bees on the roof"),
                              ("bob", "I play the cello"), ("alice", "Where do I live?"),
                              ("alice", "What about my bees?"), ("bob", "Which instrument do I play?")]:
            reply = agent.invoke({"message": message}, context={"user": user})["reply"]
            replies.append(reply)
            print(f"{user}: {message}\n  -> {reply}")
    return replies


if __name__ == "__main__":
    main()

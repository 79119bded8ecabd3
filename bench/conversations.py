"""Conversations benchmark: large threads/messages/message_embeddings tables (and facts), then
time context(), recall and turn writes on them, compare the exact recall scan with an HNSW
index, and measure concurrent turn writes.

    PYMEM_DATA_DIR=/tmp/bench-conv python bench/conversations.py --messages 1000000 --fresh

Steps: connect (``--dsn``, else ``PYMEM_DSN``, else the embedded server of ``PYMEM_DATA_DIR``),
migrate, with ``--fresh`` truncate the conversation and fact tables; generate ``--facts`` facts
(bench/facts_generate.sql, as bench/facts.py does: the probe user gets 200 active facts) plus a
few agent facts, and ``--messages`` messages set-based in chunks (bench/conversations_generate.sql):
skewed users, 384-d vectors, and the probe user (project ``acme``, user ``probe``) with exactly
``--probe-messages`` realistic messages in two threads with real HashEmbedder vectors; VACUUM
ANALYZE; check every constraint; record the plans of the statements inside
``pymem.context_read``; measure each operation ``--iterations`` times after ``--warmup``
untimed runs beside the ``SELECT 1`` floor; run the exact-vs-HNSW comparison (the HNSW index is
created for the comparison and dropped afterwards) and the concurrent turn writes; write
bench/results/conversations-<timestamp>.json. ``main(argv)`` returns the same dict.

Turn writes of the measurements go to a thread of their own (``bench-<token>``) of the probe,
and the concurrent ones to users of their own; both are deleted afterwards, so the probe keeps
exactly its messages and a second run (``--skip-generate``) measures the same data.
"""

from __future__ import annotations

import argparse
import random
import re
import secrets
import sys
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` and the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from pgvector import Vector
from psycopg import sql
from psycopg.rows import dict_row

import pymem
from bench import common
from bench import facts as bench_facts
from pymem.embedders import HashEmbedder
from pymem.queries import Q

GENERATE_SQL = Path(__file__).resolve().parent / "conversations_generate.sql"

PROJECTS = bench_facts.PROJECTS
PROBE_PROJECT = "acme"
PROBE_ID = "probe"
PROBE_FACTS = bench_facts.PROBE_ACTIVE
AGENT_ID = "bench-agent"
AGENT_FACTS = 12
DIM = 384
TIME_SPAN = timedelta(days=365)
POOL_SENTENCES = 4000
TURNS_PER_THREAD = 10  # measured turn writes start a new thread this often

# Memory's defaults: what Memory.context() asks context_read for
WINDOW = 20
MAX_FACTS = 50
RECALL_K = 5
HEAVY_WARMUP = 5  # warm-ups of the heaviest user's measurements (each reads its whole history)
MIN_CHARS = 10
WEIGHTED = {"recency_weight": 0.2, "importance_weight": 0.1, "half_life_seconds": 7 * 86400.0}

REQUIRED = (
    "floor",
    "context_sql",
    "context_memory",
    "context_sql_light_user",
    "context_memory_light_user",
    "turn_sql",
    "turn_memory",
    "turn_embed",
    "recall_sql",
    "recall_sql_weighted",
)


@dataclass(frozen=True)
class User:
    project_id: str
    user_id: str
    messages: int = 0

    def where(self, thread: str = "default") -> dict[str, str]:
        return {"project_id": self.project_id, "user_id": self.user_id, "thread_id": thread}


# --- texts -----------------------------------------------------------------------------------
# The probe's conversation: user questions and assistant answers on a dozen topics of one
# person's life, in two threads ("default" and "trips"). Other users' messages are made of
# sentences of a pool on the same topics (see conversations_generate.sql).

CITIES = ["Kyoto", "Lisbon", "Oslo", "Buenos Aires", "Vancouver", "Marrakesh", "Hanoi", "Reykjavik",
          "Vienna", "Cape Town", "Seoul", "Mexico City"]
PLACES = ["the old town", "the central station", "the harbour", "the botanical garden", "the night market",
          "the castle", "the national museum", "the river walk"]
MONTHS = ["January", "March", "April", "May", "June", "September", "October", "November"]
INGREDIENTS = ["lentils", "chickpeas", "tofu", "mushrooms", "spinach", "sweet potatoes", "aubergine", "halloumi"]
TABLES = ["orders", "invoices", "customers", "events", "payments", "sessions"]
PHRASES = ["good morning", "where is the train station", "I would like a coffee", "how much does it cost",
           "nice to meet you", "I am learning Spanish", "see you tomorrow", "the bill, please"]
LAPTOPS = ["a ThinkPad X1", "a MacBook Air", "a Framework 13", "a Dell XPS 15"]
CATEGORIES = ["groceries", "restaurants", "transport", "books", "the gym", "streaming"]
DOG_ISSUES = ["is not eating his food", "keeps scratching his ear", "limps after long walks",
              "barks at night", "ate a sock"]
ROLES = ["backend engineer", "data engineer", "site reliability engineer", "engineering manager"]

DEFAULT_TOPICS: list[tuple[list[str], list[str]]] = [
    (["We are moving the {table} database from MySQL to PostgreSQL next month. What should I check first?",
      "The {table} table has {n} million rows. How long will the copy to PostgreSQL take?",
      "Can you remind me what we decided about the indexes on the {table} table?",
      "Is it safe to add a NOT NULL column to {table} while the app is running?"],
     ["For the {table} migration, check the character sets, the sequences and the foreign keys first, then "
      "run a trial copy on a snapshot.",
      "With {n} million rows in {table}, COPY in parallel chunks should take well under an hour; build the "
      "indexes after the load.",
      "We decided to keep a composite index on {table} (customer_id, created_at) and drop the two "
      "single-column ones.",
      "On PostgreSQL 11 and later adding a column with a constant default to {table} is instant; backfill "
      "other values in batches."]),
    (["I ran {km} km this morning in {minutes} minutes. Is that a good pace for the {city} marathon?",
      "My left knee hurts after long runs. Should I skip tomorrow's {km} km?",
      "What should I eat the evening before a {km} km long run?"],
     ["{km} km in {minutes} minutes is a steady pace; keep most runs easy and add one tempo run a week "
      "before the {city} marathon.",
      "Rest the knee for two days and replace the {km} km run with cycling; see a physiotherapist if it "
      "still hurts.",
      "Eat a normal dinner rich in carbohydrates, such as pasta or rice, and drink enough water."]),
    (["How do I say '{phrase}' in Spanish?",
      "Can you give me five Spanish verbs to practise for my lesson on {month} 3rd?",
      "I keep mixing up ser and estar. Can you explain the difference again?"],
     ["'{phrase}' is a good one to learn; I gave you the Spanish version with its pronunciation.",
      "Practise hablar, comer, vivir, tener and ir, each in the present and the past tense.",
      "Ser is for lasting traits and identity, estar for states and locations: soy alto, estoy cansado."]),
    (["Give me a vegetarian dinner recipe with {ingredient} for {people} people.",
      "I have {ingredient} and rice left. What can I cook tonight?",
      "My sister is coming for dinner and she does not eat gluten. Any ideas with {ingredient}?"],
     ["Try a {ingredient} curry: onions, garlic, ginger, tomatoes, coconut milk and {ingredient}, served "
      "with rice for {people}.",
      "A fried rice with {ingredient}, spring onions, soy sauce and an egg takes twenty minutes.",
      "A gluten-free {ingredient} stew with polenta would work well; check the labels of the stock cubes."]),
    (["My dog Biscuit {dog_issue}. Should I call the vet?",
      "How often should Biscuit get his vaccinations?",
      "What is a good chew toy for a beagle like Biscuit?"],
     ["If Biscuit {dog_issue} for more than a day, call the vet; note when it started and what he ate.",
      "Most dogs get boosters once a year; Biscuit's vet card says the next one is due in {month}.",
      "A hard rubber toy that can be filled with food keeps a beagle busy and is safe to chew."]),
    (["I spent {amount} euros on {category} this month. Am I over budget?",
      "Help me plan a monthly budget: my rent is {rent} euros and I earn {salary} euros.",
      "How much should I save each month to have {amount}0 euros by {month}?"],
     ["Your budget for {category} is {budget} euros, so {amount} euros is a bit over; the rest of the month "
      "is on track.",
      "With {salary} euros and a rent of {rent} euros, put 20 percent aside first and split the rest "
      "between needs and wants.",
      "Saving about {budget} euros a month gets you there by {month}."]),
    (["Should I buy {laptop} for programming? My budget is {amount}0 euros.",
      "The battery of my old laptop lasts two hours. Is it worth replacing it or should I buy {laptop}?"],
     ["{laptop} is a good choice for programming; get at least 16 GB of memory and a 512 GB disk.",
      "A new battery costs far less than {laptop}; replace it unless the laptop is also slow."]),
    (["I have a job interview for a {role} position on {month} 12th. Can you help me prepare?",
      "What questions should I ask at the end of the interview for the {role} job?",
      "They asked me to design a URL shortener in the interview. How should I structure my answer?"],
     ["For a {role} interview, prepare two stories about incidents you solved and review system design "
      "basics: caching, queues and databases.",
      "Ask how on-call works, how the team ships changes and what success looks like after six months.",
      "Start with the requirements, estimate the load, then design the API, the storage and the cache, "
      "and discuss trade-offs."]),
]

TRIP_TOPICS: list[tuple[list[str], list[str]]] = [
    (["I want to visit {city} in {month}. What are the must-see places?",
      "Which neighbourhood of {city} is best to stay in for a first visit?",
      "Is {month} a good time to go to {city}, or is it too crowded?"],
     ["In {city}, start with {place}, then walk to the market; book the popular museums a week ahead.",
      "Stay near {place} in {city}: quiet at night and close to the trains.",
      "{month} is a fine time for {city}; go early in the morning to avoid the crowds at {place}."]),
    (["Find me a hotel near {place} in {city} under {amount} euros a night.",
      "I booked the hotel near {place} in {city}. Can I cancel it for free?",
      "Does the hotel in {city} have breakfast included?"],
     ["There are three hotels near {place} in {city} under {amount} euros; the second has the best reviews.",
      "Your booking near {place} in {city} can be cancelled for free until two days before arrival.",
      "Breakfast is included in your {city} booking and is served from seven to ten."]),
    (["My flight to {city} leaves at {hour}. When should I leave for the airport?",
      "Can I take a power bank in my cabin bag on the flight to {city}?",
      "Do I need a visa to travel to {city} with a Norwegian passport?"],
     ["For a {hour} flight, leave three hours before; check in online the day before.",
      "Power banks must go in the cabin bag, never in checked luggage.",
      "For a stay of under 90 days in {city} you do not need a visa, but your passport must be valid "
      "for six months."]),
    (["What is the weather like in {city} in {month}?",
      "What should I pack for {city} in {month}?"],
     ["{city} in {month} is mild during the day and cool at night; bring a light jacket.",
      "Pack layers, comfortable shoes for walking around {place} and an umbrella."]),
]

SHORT = ["ok", "thanks!", "yes", "sure", "no thanks", "great", "got it", "cool", "why?", "and then?",
         "perfect, thank you", "sounds good to me", "ok, do it", "hmm", "yes please", "not now"]

PROBE_QUERIES = [
    "which hotel did I book in Kyoto",
    "what did we decide about the indexes on the orders table",
    "how fast did I run my last long run",
    "how do I say good morning in Spanish",
    "vegetarian dinner ideas with lentils",
    "is Biscuit sick, should I call the vet",
    "am I over budget on groceries this month",
    "which laptop should I buy for programming",
    "help me prepare for the backend engineer interview",
    "do I need a visa for the trip",
    "what should I pack for Oslo in November",
    "when should I leave for the airport",
    "how long will the database copy take",
    "my knee hurts after running",
    "gluten free recipe for my sister",
    "the difference between ser and estar",
    "can I cancel the hotel booking for free",
    "how much should I save each month",
    "battery of my old laptop",
    "questions to ask at the end of the interview",
    "what to eat before a long run",
    "must-see places in Lisbon",
    "chew toy for a beagle",
    "is breakfast included at the hotel",
    "adding a NOT NULL column while the app is running",
    "power bank in the cabin bag",
    "which neighbourhood should I stay in",
    "weather in Seoul in October",
    "monthly budget with my rent and salary",
    "design a URL shortener",
    "Spanish verbs to practise for my lesson",
    "Biscuit vaccinations",
]

TURNS = [
    ("Can you summarise what we planned for the trip?", "You fly on the 12th, stay near the old town and "
     "visit the national museum on the second day."),
    ("What should I cook tonight with the spinach I have left?", "A spinach and chickpea curry with rice "
     "takes thirty minutes."),
    ("Remind me what we decided about the payments table.", "We keep a composite index on (customer_id, "
     "created_at) and drop the old single-column ones."),
    ("I ran 12 km today in 65 minutes.", "That is a steady pace; keep tomorrow easy."),
    ("How do I say 'see you tomorrow' in Spanish?", "Hasta mañana."),
    ("Biscuit ate a sock again.", "Watch him for vomiting or lethargy and call the vet if either appears."),
    ("I spent 140 euros on restaurants this month.", "That is 20 euros over your budget for restaurants."),
    ("Is the Framework 13 good for programming?", "Yes; take 32 GB of memory if you run containers."),
]


def _fill(template: str, rng: random.Random) -> str:
    values = {
        "city": rng.choice(CITIES), "place": rng.choice(PLACES), "month": rng.choice(MONTHS),
        "ingredient": rng.choice(INGREDIENTS), "table": rng.choice(TABLES), "phrase": rng.choice(PHRASES),
        "laptop": rng.choice(LAPTOPS), "category": rng.choice(CATEGORIES), "dog_issue": rng.choice(DOG_ISSUES),
        "role": rng.choice(ROLES), "n": rng.randint(2, 90), "km": rng.randint(5, 32),
        "minutes": rng.randint(25, 200), "people": rng.randint(2, 8), "amount": rng.randint(40, 400),
        "rent": rng.randint(600, 1800), "salary": rng.randint(2500, 6000), "budget": rng.randint(50, 300),
        "hour": f"{rng.randint(6, 21)}:{rng.choice(['00', '15', '30', '45'])}",
    }
    return template.format(**values)


def probe_conversation(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` messages in turns (a user message, then the answer) over two threads: every
    fifth turn pair 1 and 3 go to "trips" (about 40%), the rest to "default". Roles alternate
    within a thread (user at odd seq). About 5% of user messages are short ("ok", ...)."""
    rng = random.Random(seed * 7919 + 17)
    out: list[dict[str, Any]] = []
    seqs = {"default": 0, "trips": 0}
    turn = 0
    while len(out) < count:
        thread = "trips" if turn % 5 in (1, 3) else "default"
        topics = TRIP_TOPICS if thread == "trips" else DEFAULT_TOPICS
        users, answers = topics[rng.randrange(len(topics))]
        j = rng.randrange(len(users))
        state = rng.getstate()
        question = _fill(users[j], rng)
        rng.setstate(state)  # the answer mentions the same city, table, ... as the question
        answer = _fill(answers[min(j, len(answers) - 1)], rng)
        if rng.random() < 0.05:
            question = rng.choice(SHORT)
        for role, content in (("user", question), ("assistant", answer)):
            if len(out) == count:
                break
            seqs[thread] += 1
            importance = 1.0 if rng.random() < 0.7 else round(rng.random(), 2)
            out.append({"i": len(out), "thread_id": thread, "seq": seqs[thread], "role": role,
                        "content": content, "importance": importance})
        turn += 1
    return out


def pool_sentences(count: int, seed: int) -> list[str]:
    """``count`` distinct sentences on the probe's topics (other users' messages are made of them)."""
    rng = random.Random(seed * 104729 + 3)
    templates = [t for users, answers in DEFAULT_TOPICS + TRIP_TOPICS for t in users + answers]
    seen: set[str] = set()
    out: list[str] = []
    attempts = 0
    while len(out) < count and attempts < count * 50:
        attempts += 1
        s = _fill(rng.choice(templates), rng)
        if s not in seen:
            seen.add(s)
            out.append(s)
    n = 0
    while len(out) < count:  # small pools only: number the sentences to keep them distinct
        out.append(f"{_fill(rng.choice(templates), rng)} (note {n})")
        n += 1
    return out


class PrecomputedEmbedder:
    """HashEmbedder's name and dimension, vectors looked up in a table filled beforehand: what
    Memory costs with the embedding taken out. A text not in the table is embedded for real
    (counted in ``misses``)."""

    def __init__(self, real: HashEmbedder, texts: list[str]) -> None:
        self.name = real.name
        self.dimension = real.dimension
        self._real = real
        self._table = dict(zip(texts, real.embed(texts), strict=True))
        self.misses = 0

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for t in texts:
            v = self._table.get(t)
            if v is None:
                self.misses += 1
                v = self._real.embed([t])[0]
            out.append(v)
        return out


def load_sections() -> dict[str, str]:
    return bench_facts.load_sections(GENERATE_SQL)


# --- arguments -------------------------------------------------------------------------------


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"need positive integers: {text!r}")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/conversations.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1_000_000, help="messages to generate (default 1000000)")
    p.add_argument("--probe-messages", type=int, default=1000, help="the probe user's messages (default 1000)")
    p.add_argument("--facts", type=int, default=None,
                   help="facts to generate (default: as many as messages, at least 1000)")
    p.add_argument("--users", type=int, default=None,
                   help="user ids the messages are spread over (default messages/40)")
    p.add_argument("--dsn", help="libpq connection string (default: PYMEM_DSN, else the embedded server)")
    p.add_argument("--fresh", action="store_true",
                   help="truncate threads, messages, message_embeddings, facts and fact_embeddings first")
    p.add_argument("--skip-generate", action="store_true", help="measure the data already there")
    p.add_argument("--iterations", type=int, default=1000, help="timed runs per measurement (default 1000)")
    p.add_argument("--warmup", type=int, default=50, help="untimed runs before each measurement (default 50)")
    p.add_argument("--heavy-iterations", type=int, default=200,
                   help="timed runs of the heaviest user's measurements (default 200)")
    p.add_argument("--seed", type=int, default=1, help="generation seed (default 1)")
    p.add_argument("--chunk", type=int, default=50_000, help="messages per INSERT (default 50000)")
    p.add_argument("--fact-chunk", type=int, default=100_000, help="facts per INSERT (default 100000)")
    p.add_argument("--unembedded", type=float, default=0.01,
                   help="share of other users' messages without a vector (default 0.01)")
    p.add_argument("--work-mem", default="512MB", help="work_mem of the generating session (default 512MB)")
    p.add_argument("--no-hnsw", action="store_true", help="skip the exact-vs-HNSW comparison")
    p.add_argument("--hnsw-iterations", type=int, default=100, help="timed runs per HNSW variant (default 100)")
    p.add_argument("--hnsw-queries", type=int, default=32, help="query vectors for recall@k (default 32)")
    p.add_argument("--hnsw-k", type=int, default=RECALL_K, help="k of the comparison (default 5)")
    p.add_argument("--hnsw-ef", type=_int_list, default=[40, 100, 400],
                   help="hnsw.ef_search values, comma-separated (default 40,100,400)")
    p.add_argument("--hnsw-m", type=int, default=16, help="HNSW m (default 16)")
    p.add_argument("--hnsw-ef-construction", type=int, default=64, help="HNSW ef_construction (default 64)")
    p.add_argument("--hnsw-maintenance-work-mem", default="4GB",
                   help="maintenance_work_mem for the index build (default 4GB)")
    p.add_argument("--hnsw-workers", type=int, default=1,
                   help="max_parallel_maintenance_workers for the index build (default 1)")
    p.add_argument("--concurrency", type=_int_list, default=[1, 2, 4, 8],
                   help="client threads of the concurrent turn writes (default 1,2,4,8)")
    p.add_argument("--concurrency-turns", type=int, default=300,
                   help="turns each client thread writes (default 300)")
    p.add_argument("--growth-turns", type=int, default=5000,
                   help="turns written into one growing thread for turn_growth (default 5000)")
    p.add_argument("--growth-block", type=int, default=500, help="turns per turn_growth figure (default 500)")
    p.add_argument("--no-verify", action="store_true", help="skip the integrity checks after generation")
    p.add_argument("--results-dir", default=None, help="where to write the JSON (default bench/results)")
    p.add_argument("--no-write", action="store_true", help="do not write a result file")
    p.add_argument("--samples", action="store_true", help="keep every sample (ns) in the JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    args = p.parse_args(argv)
    if args.probe_messages < 2:
        p.error("--probe-messages must be at least 2")
    if not args.skip_generate and args.messages < 2 * args.probe_messages + 100:
        p.error(f"--messages must be at least {2 * args.probe_messages + 100} (twice the probe's, plus 100)")
    if args.iterations < 1 or args.warmup < 0 or args.heavy_iterations < 1 or args.hnsw_iterations < 1:
        p.error("iterations must be >= 1 and --warmup >= 0")
    if not 0 <= args.unembedded < 1:
        p.error("--unembedded must be in [0, 1)")
    if args.facts is None:
        args.facts = max(args.messages, bench_facts.MIN_ROWS)
    if args.facts < bench_facts.MIN_ROWS:
        p.error(f"--facts must be at least {bench_facts.MIN_ROWS} (the probe's 250 facts are spread over them)")
    if args.users is None:
        args.users = max(50, args.messages // 40)
    args.chunk = max(1, args.chunk)
    args.fact_chunk = max(4, args.fact_chunk - args.fact_chunk % 4)
    return args


# --- generation ------------------------------------------------------------------------------


def table_rows(conn: psycopg.Connection) -> dict[str, bool]:
    return {t: conn.execute(f"SELECT EXISTS (SELECT 1 FROM pymem.{t})").fetchone()[0]
            for t in ("threads", "messages", "message_embeddings", "facts")}


def generate_facts(conn: psycopg.Connection, args: argparse.Namespace, embedder: HashEmbedder) -> dict[str, Any]:
    """``--facts`` facts as bench/facts.py makes them (the probe: 200 active + 50 superseded),
    and AGENT_FACTS facts of the agent the context reads."""
    probe = bench_facts.Subject(PROBE_PROJECT, "user", PROBE_ID)
    common.progress(f"generating {args.facts:,} facts (bench/facts_generate.sql)")
    out = bench_facts.generate(conn, args.facts, probe, seed=args.seed, chunk=args.fact_chunk)
    out.pop("params", None)
    for i in range(AGENT_FACTS):
        conn.execute(Q["fact_add"], {
            "scope": "agent", "scope_id": AGENT_ID, "project_id": PROBE_PROJECT,
            "content": f"Agent rule {i + 1}: " + ["answer in the user's language", "never share another user's data",
                                                    "prices are in euros", "support hours are 9 to 5 CET",
                                                    "refunds take up to 10 working days",
                                                    "escalate legal questions to a human"][i % 6],
            "confidence": 1.0, "source": "manual", "trace_id": None, "metadata": psycopg.types.json.Jsonb({}),
            "max_learned": 200, "embedding": None, "embedder": None}).fetchall()
    out["agent_facts"] = AGENT_FACTS
    return out


def generate_messages(conn: psycopg.Connection, args: argparse.Namespace, embedder: HashEmbedder) -> dict[str, Any]:
    """Threads, messages and vectors, one INSERT ... SELECT generate_series per chunk."""
    q = load_sections()
    conn.execute(bench_facts.load_sections()["uniform"])
    t_start = time.perf_counter_ns()
    # the pool (other users' sentences + short messages) and the probe's conversation, embedded here
    conn.execute(q["pool_table"], prepare=False)
    conn.execute(q["probe_table"], prepare=False)
    sentences = pool_sentences(POOL_SENTENCES, args.seed)
    pool = sentences + SHORT
    vectors = embedder.embed(pool)
    with conn.cursor() as cur:
        cur.executemany(q["pool_insert"], [{"i": i, "content": c, "embedding": Vector(v)}
                                           for i, (c, v) in enumerate(zip(pool, vectors, strict=True))])
    probe_rows = probe_conversation(args.probe_messages, args.seed)
    probe_vectors = embedder.embed([r["content"] for r in probe_rows])
    with conn.cursor() as cur:
        cur.executemany(q["probe_insert"], [r | {"embedding": Vector(v)}
                                            for r, v in zip(probe_rows, probe_vectors, strict=True)])
    conn.execute("ANALYZE pg_temp.bench_pool")
    conn.execute("ANALYZE pg_temp.bench_probe")
    conn.execute(q["register_embedder"], {"embedder": embedder.name, "dim": embedder.dimension,
                                          "projects": sorted(set(PROJECTS) | {PROBE_PROJECT})})
    prep_s = (time.perf_counter_ns() - t_start) / 1e9
    n = args.messages
    params = {
        "n": n, "t0": datetime.now(UTC), "step": TIME_SPAN / n, "seed": args.seed, "projects": PROJECTS,
        "users": args.users, "stride": n // args.probe_messages, "probe_n": args.probe_messages,
        "probe_project": PROBE_PROJECT, "probe_id": PROBE_ID, "embedder": embedder.name,
        "pool_n": len(sentences), "short_n": len(SHORT), "unembedded": args.unembedded,
    }
    chunks = []
    # Foreign-key checks off for this session while loading (session_replication_role = replica,
    # superusers only), as pg_restore does: the check of message_embeddings -> messages can be
    # planned on messages_embedded_by (project_id, user_id) and then reads all of the user's
    # messages per inserted vector (quadratic in a heavy user's messages; see bench/README.md).
    # integrity() then checks every reference over every row instead.
    try:
        conn.execute("SET session_replication_role = replica")
        fk_checks = False
    except psycopg.Error:
        fk_checks = True
    t_start = time.perf_counter_ns()
    totals = {"messages": 0, "embeddings": 0}
    try:
        for lo in range(0, n, args.chunk):
            hi = min(n, lo + args.chunk)
            t0 = time.perf_counter_ns()
            row = conn.execute(q["chunk"], params | {"lo": lo, "hi": hi}, prepare=False).fetchone()
            dt = (time.perf_counter_ns() - t0) / 1e9
            chunks.append({"lo": lo, "hi": hi, "messages": row[0], "embeddings": row[1], "threads": row[2],
                           "seconds": round(dt, 3)})
            totals["messages"] += row[0]
            totals["embeddings"] += row[1]
            done = (time.perf_counter_ns() - t_start) / 1e9
            common.progress(f"generated {hi:>10,}/{n:,} messages  (chunk {hi - lo:,} in {dt:.1f}s, "
                            f"{(hi - lo) / dt:,.0f} msg/s; total {hi / done:,.0f} msg/s)")
    finally:
        conn.execute("RESET session_replication_role")
    insert_s = (time.perf_counter_ns() - t_start) / 1e9
    t0 = time.perf_counter_ns()
    conn.execute(q["summaries"], params)
    summaries = {"default": "The user is preparing a PostgreSQL migration of the orders database at work, "
                            "training for a marathon, learning Spanish and looking after the dog Biscuit.",
                 "trips": "The user is planning trips to Kyoto and Lisbon: hotels near the old town, "
                          "flights in the morning, no visa needed."}
    for thread, text in summaries.items():
        conn.execute(q["probe_summary"], params | {"thread_id": thread, "summary": text})
    summary_s = (time.perf_counter_ns() - t0) / 1e9
    t0 = time.perf_counter_ns()
    for table in ("threads", "messages", "message_embeddings"):
        conn.execute(f"VACUUM ANALYZE pymem.{table}")
    vacuum_s = (time.perf_counter_ns() - t0) / 1e9
    common.progress(f"summaries in {summary_s:.1f}s, VACUUM ANALYZE in {vacuum_s:.1f}s")
    t0 = time.perf_counter_ns()
    try:  # write the load out now rather than during the measurements (superuser or pg_checkpoint)
        conn.execute("CHECKPOINT")
    except psycopg.Error:
        pass
    checkpoint_s = (time.perf_counter_ns() - t0) / 1e9
    # the probe's messages are exactly what was planned, seq for seq
    got = conn.execute(
        "SELECT thread_id, seq, role, content FROM pymem.messages WHERE project_id = %s AND user_id = %s "
        "ORDER BY created_at, thread_id, seq", (PROBE_PROJECT, PROBE_ID)).fetchall()
    planned = [(r["thread_id"], r["seq"], r["role"], r["content"]) for r in probe_rows]
    return {
        "messages": totals["messages"],
        "embeddings": totals["embeddings"],
        "requested_messages": n,
        "prepare_seconds": round(prep_s, 2),
        "insert_seconds": round(insert_s, 2),
        "insert_messages_per_s": round(totals["messages"] / insert_s, 0),
        "summaries_seconds": round(summary_s, 2),
        "vacuum_analyze_seconds": round(vacuum_s, 2),
        "checkpoint_seconds": round(checkpoint_s, 2),
        "seconds": round(prep_s + insert_s + summary_s + vacuum_s, 2),
        "chunk_messages": args.chunk,
        "foreign_key_checks_during_load": fk_checks,
        "chunks": chunks,
        "pool_sentences": len(sentences),
        "probe_as_planned": got == planned,
        "params": {k: (str(v) if isinstance(v, (datetime, timedelta)) else v) for k, v in params.items()},
    }


# --- what the tables hold --------------------------------------------------------------------


def user_counts(conn: psycopg.Connection, user: User, embedder: str) -> dict[str, Any]:
    """A user's messages (per thread), vectors of ``embedder`` and facts."""
    per_thread = dict(conn.execute(
        "SELECT thread_id, count(*) FROM pymem.messages WHERE project_id = %s AND user_id = %s "
        "GROUP BY thread_id ORDER BY thread_id", (user.project_id, user.user_id)).fetchall())
    embedded = conn.execute(
        "SELECT count(*) FROM pymem.messages WHERE project_id = %s AND user_id = %s AND embedded_by = %s",
        (user.project_id, user.user_id, embedder)).fetchone()[0]
    vectors = conn.execute(
        "SELECT count(*) FROM pymem.message_embeddings WHERE project_id = %s AND user_id = %s AND embedder = %s",
        (user.project_id, user.user_id, embedder)).fetchone()[0]
    facts = bench_facts.subject_counts(conn, bench_facts.Subject(user.project_id, "user", user.user_id))
    return {"messages": sum(per_thread.values()), "embedded": embedded, "vectors": vectors,
            "threads": len(per_thread), "per_thread": per_thread, "facts_active": facts["active"],
            "facts_superseded": facts["superseded"]}


def choose_light(conn: psycopg.Connection) -> User | None:
    """The lightest user of the probe's project (at least 5 messages, all embedded, a 'default'
    thread): the other end of the skew."""
    row = conn.execute(
        """SELECT user_id, count(*) FROM pymem.messages
            WHERE project_id = %s AND user_id <> %s
            GROUP BY user_id
           HAVING count(*) FILTER (WHERE embedded_by IS NULL) = 0
              AND count(*) FILTER (WHERE thread_id = 'default') > 0 AND count(*) >= 5
            ORDER BY count(*), user_id LIMIT 1""", (PROBE_PROJECT, PROBE_ID)).fetchone()
    return User(PROBE_PROJECT, row[0], row[1]) if row else None


def choose_heavy(conn: psycopg.Connection) -> User | None:
    """The user with the most messages (who has a 'default' thread)."""
    row = conn.execute(
        """SELECT project_id, user_id, count(*) FROM pymem.messages
            GROUP BY project_id, user_id
           HAVING count(*) FILTER (WHERE thread_id = 'default') > 0
            ORDER BY count(*) DESC, project_id, user_id LIMIT 1""").fetchone()
    return User(row[0], row[1], row[2]) if row else None


def dataset(conn: psycopg.Connection) -> dict[str, Any]:
    """Counts, skew and sizes of the conversation tables (and of pymem.facts)."""
    c = conn.cursor(row_factory=dict_row)
    messages = c.execute(
        """SELECT count(*) AS messages,
                  count(*) FILTER (WHERE embedded_by IS NULL) AS unembedded,
                  count(*) FILTER (WHERE role = 'user') AS user_role,
                  count(*) FILTER (WHERE role = 'assistant') AS assistant_role,
                  count(*) FILTER (WHERE length(content) < 10) AS shorter_than_10_chars,
                  round(avg(length(content))) AS avg_content_chars,
                  max(length(content)) AS max_content_chars,
                  count(DISTINCT project_id) AS projects
           FROM pymem.messages""").fetchone()
    threads = c.execute(
        """SELECT count(*) AS threads, count(*) FILTER (WHERE summary IS NOT NULL) AS threads_with_summary,
                  max(last_seq) AS longest_thread
           FROM pymem.threads""").fetchone()
    vectors = c.execute("SELECT count(*) AS vectors FROM pymem.message_embeddings").fetchone()
    users = c.execute(
        """SELECT count(*) AS users, max(n) AS max_messages,
                  percentile_disc(0.5) WITHIN GROUP (ORDER BY n) AS median_messages,
                  percentile_disc(0.9) WITHIN GROUP (ORDER BY n) AS p90_messages,
                  percentile_disc(0.99) WITHIN GROUP (ORDER BY n) AS p99_messages,
                  count(*) FILTER (WHERE n <= 20) AS users_le_20_messages,
                  count(*) FILTER (WHERE n >= 1000) AS users_ge_1000_messages
           FROM (SELECT count(*) AS n FROM pymem.messages GROUP BY project_id, user_id) AS s""").fetchone()
    facts = c.execute(
        """SELECT count(*) AS facts, count(*) FILTER (WHERE superseded_by IS NULL) AS active_facts,
                  count(*) FILTER (WHERE scope = 'user') AS user_facts,
                  count(*) FILTER (WHERE scope = 'agent') AS agent_facts
           FROM pymem.facts""").fetchone()
    sizes = {}
    for table in ("threads", "messages", "message_embeddings", "facts"):
        row = c.execute(
            "SELECT pg_relation_size(%(t)s) AS heap, pg_indexes_size(%(t)s) AS indexes, "
            "pg_total_relation_size(%(t)s) AS total", {"t": f"pymem.{table}"}).fetchone()
        sizes[table] = row
    index_sizes = {
        r["name"]: r["bytes"] for r in c.execute(
            """SELECT i.indexrelid::regclass::text AS name, pg_relation_size(i.indexrelid) AS bytes
               FROM pg_index AS i
               WHERE i.indrelid IN ('pymem.threads'::regclass, 'pymem.messages'::regclass,
                                    'pymem.message_embeddings'::regclass)
               ORDER BY 1""").fetchall()}
    return {**messages, **threads, **vectors, **users, **facts, "bytes": sizes, "index_bytes": index_sizes}


def check_constraints(conn: psycopg.Connection, table: str) -> dict[str, int]:
    """Every CHECK constraint of ``table`` re-evaluated over every row (one pass): violations."""
    checks = conn.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'c' "
        "ORDER BY conname", (table,)).fetchall()
    if not checks:
        return {}
    exprs = []
    for name, definition in checks:
        m = re.fullmatch(r"CHECK \((.*)\)(?: NOT VALID)?", definition, flags=re.DOTALL)
        exprs.append(sql.SQL("count(*) FILTER (WHERE ({}) IS FALSE) AS {}").format(
            sql.SQL(m.group(1)), sql.Identifier(name)))
    schema, _, name = table.partition(".")
    row = conn.cursor(row_factory=dict_row).execute(
        sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(exprs), sql.Identifier(schema, name))).fetchone()
    return dict(row)


def integrity(conn: psycopg.Connection, embedder: str, dim: int) -> dict[str, Any]:
    """Every CHECK of threads and messages over every row; every message has its thread and
    every vector its message (the foreign keys); last_seq = max(seq) = the thread's message
    count; vectors copy chars/importance/created_at from their message, are ``dim``-d,
    finite and not zero; embedded_by names the embedder exactly when a vector exists; every
    constraint validated. All counts are 0 on a healthy load."""
    c = conn.cursor(row_factory=dict_row)
    checks = {**check_constraints(conn, "pymem.threads"), **check_constraints(conn, "pymem.messages")}
    seqs = c.execute(
        """SELECT count(*) FILTER (WHERE m.n IS NULL AND t.last_seq > 0) AS threads_missing_messages,
                  count(*) FILTER (WHERE t.last_seq IS NULL) AS messages_without_thread,
                  count(*) FILTER (WHERE m.max_seq <> t.last_seq) AS last_seq_not_max_seq,
                  count(*) FILTER (WHERE m.n <> t.last_seq OR m.min_seq <> 1) AS seq_not_contiguous
           FROM pymem.threads AS t
           FULL JOIN (SELECT project_id, user_id, thread_id, count(*) AS n, max(seq) AS max_seq, min(seq) AS min_seq
                        FROM pymem.messages GROUP BY project_id, user_id, thread_id) AS m
             ON m.project_id = t.project_id AND m.user_id = t.user_id AND m.thread_id = t.thread_id""").fetchone()
    vectors = c.execute(
        """SELECT count(*) FILTER (WHERE m.seq IS NULL) AS vectors_without_message,
                  count(*) FILTER (WHERE e.chars <> length(m.content) OR e.importance <> m.importance
                                      OR e.created_at <> m.created_at) AS vector_copy_mismatch,
                  count(*) FILTER (WHERE m.embedded_by IS DISTINCT FROM e.embedder) AS embedded_by_mismatch,
                  count(*) FILTER (WHERE e.embedder = %(embedder)s AND vector_dims(e.embedding) <> %(dim)s)
                      AS wrong_dimension,
                  count(*) FILTER (WHERE vector_norm(e.embedding) = 'NaN'::float8
                                      OR vector_norm(e.embedding) = 'Infinity'::float8
                                      OR vector_norm(e.embedding) = 0) AS nan_inf_or_zero
           FROM pymem.message_embeddings AS e
           LEFT JOIN pymem.messages AS m
             ON m.project_id = e.project_id AND m.user_id = e.user_id AND m.thread_id = e.thread_id
            AND m.seq = e.seq""", {"embedder": embedder, "dim": dim}).fetchone()
    embedded_by = c.execute(
        """SELECT count(*) AS embedded_by_without_vector FROM pymem.messages AS m
            WHERE m.embedded_by IS NOT NULL AND NOT EXISTS (
                  SELECT 1 FROM pymem.message_embeddings AS e
                   WHERE e.project_id = m.project_id AND e.user_id = m.user_id AND e.embedder = m.embedded_by
                     AND e.thread_id = m.thread_id AND e.seq = m.seq)""").fetchone()
    not_valid = [r[0] for r in conn.execute(
        """SELECT conname FROM pg_constraint
            WHERE conrelid IN ('pymem.threads'::regclass, 'pymem.messages'::regclass,
                               'pymem.message_embeddings'::regclass) AND NOT convalidated""").fetchall()]
    counts = {**checks, **seqs, **vectors, **embedded_by}
    return {"ok": not not_valid and not any(counts.values()), "violations": counts, "not_validated": not_valid}


# --- plans -----------------------------------------------------------------------------------


def _function_body(conn: psycopg.Connection, name: str) -> str:
    return conn.execute("SELECT prosrc FROM pg_proc WHERE oid = %s::regproc", (name,)).fetchone()[0]


def _with_literals(conn: psycopg.Connection, body: str, values: dict[str, Any]) -> str:
    """A SQL function's body with its p_* parameters replaced by literals."""
    def sub(m: re.Match[str]) -> str:
        v = values[m.group(0)]
        if isinstance(v, Vector):
            return sql.SQL("{}::vector").format(sql.Literal(v.to_text())).as_string(conn)
        return sql.Literal(v).as_string(conn)

    return re.sub(r"\bp_[a-z_]+\b", sub, body).strip().rstrip(";")


def context_params(user: User, query_vec: Vector | None, embedder: str, **over: Any) -> dict[str, Any]:
    """The parameters pymem.context._Context._read sends (Memory's defaults)."""
    return {
        "user_id": user.user_id, "agent_id": AGENT_ID, "project_id": user.project_id, "thread_id": "default",
        "query": query_vec, "embedder": embedder if query_vec is not None else None, "max_facts": MAX_FACTS,
        "window_size": WINDOW, "k": RECALL_K, "min_content_chars": MIN_CHARS, "recency_weight": 0.0,
        "importance_weight": 0.0, "half_life_seconds": 3600.0, "dedupe": True, "max_unembedded": 1000,
    } | over


def recall_params(user: User, query_vec: Vector, embedder: str, **over: Any) -> dict[str, Any]:
    return {
        **user.where(), "query": query_vec, "embedder": embedder, "k": RECALL_K, "min_content_chars": MIN_CHARS,
        "window_size": WINDOW, "recency_weight": 0.0, "importance_weight": 0.0, "half_life_seconds": 3600.0,
    } | over


def _sort_inputs(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Each Sort node of an analyzed plan with the rows it sorted (its input)."""
    out = []

    def walk(node: dict[str, Any]) -> None:
        if node["Node Type"] in ("Sort", "Incremental Sort"):
            child = (node.get("Plans") or [{}])[0]
            out.append({"sort_key": common.shorten(node.get("Sort Key")), "method": node.get("Sort Method"),
                        "input_rows": (child.get("Actual Rows") or 0) * (child.get("Actual Loops") or 1),
                        "input_node": child.get("Node Type"),
                        "input_relation": child.get("Relation Name") or child.get("Index Name")})
        for sub in node.get("Plans", ()):
            walk(sub)

    walk(plan)
    return out


def _scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Each scan node of an analyzed plan with the rows it read (returned + removed by its filter)."""
    out = []

    def walk(node: dict[str, Any]) -> None:
        if "Scan" in node["Node Type"] and node["Node Type"] not in ("Function Scan", "Subquery Scan", "CTE Scan",
                                                                       "Values Scan", "WorkTable Scan"):
            loops = node.get("Actual Loops") or 1
            read = ((node.get("Actual Rows") or 0) + (node.get("Rows Removed by Filter") or 0)
                    + (node.get("Rows Removed by Index Recheck") or 0)) * loops
            out.append({"node": node["Node Type"], "relation": node.get("Relation Name"),
                        "index": node.get("Index Name"), "rows_read": read,
                        "rows_returned": (node.get("Actual Rows") or 0) * loops,
                        "filter": common.shorten(node.get("Filter"))})
        for sub in node.get("Plans", ()):
            walk(sub)

    walk(plan)
    return out


def summarize_nested(plans: list[dict[str, Any]] | None, user_messages: int) -> list[dict[str, Any]]:
    """One line per statement run inside the function: time, buffers, scans, Seq Scan and the
    Sorts, and whether a Sort or a scan took the whole user (at least half the user's messages)."""
    if not plans:
        return []
    whole = max(2, user_messages // 2)
    out = []
    for p in plans:
        top = p["plan"]["Plan"]
        sorts = _sort_inputs(top)
        scans = _scans(top)
        out.append({
            "query": p["query"][:200],
            "duration_ms": p.get("duration_ms"),
            "shared_hit_blocks": top.get("Shared Hit Blocks"),
            "shared_read_blocks": top.get("Shared Read Blocks"),
            "rows": top.get("Actual Rows"),
            "indexes": p["indexes"],
            "seq_scan": p["seq_scan"],
            "seq_scans": [s["relation"] for s in scans if s["node"] in ("Seq Scan", "Parallel Seq Scan")],
            "sorts": sorts,
            "scans": scans,
            "whole_user_sort": any(s["input_rows"] >= whole for s in sorts),
            "whole_user_scans": [f"{s['node']} on {s['relation']}" + (f" using {s['index']}" if s["index"] else "")
                                 + f" ({s['rows_read']:.0f} rows read, {s['rows_returned']:.0f} kept)"
                                 for s in scans if s["rows_read"] >= whole],
        })
    return out


def collapse_statements(statements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive runs of the same statement (e.g. pymem._norm once per recalled row) as one line."""
    out: list[dict[str, Any]] = []
    for s in statements:
        if out and out[-1]["query"][:80] == s["query"][:80]:
            last = out[-1]
            last["count"] += 1
            last["duration_ms"] = (last["duration_ms"] or 0) + (s["duration_ms"] or 0)
            last["shared_hit_blocks"] = (last["shared_hit_blocks"] or 0) + (s["shared_hit_blocks"] or 0)
            last["shared_read_blocks"] = (last["shared_read_blocks"] or 0) + (s["shared_read_blocks"] or 0)
        else:
            out.append({**s, "count": 1})
    return out


def plans(conn: psycopg.Connection, dsn: str, probe: User, heavy: User | None, embedder: HashEmbedder,
          qvec: Vector) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of context_read's call and of every statement it runs inside
    (auto_explain, on its 8th call), and of _recall_ranked / _messages_unembedded with the
    probe's values as literals."""
    out: dict[str, Any] = {}
    call = sql.SQL("SELECT pymem.context_read(user_id => {u}, agent_id => {a}, project_id => {p}, "
                   "thread_id => 'default', query => {q}::vector, embedder => {e}, max_facts => {mf}, "
                   "window_size => {w}, k => {k}, min_content_chars => {mc})").format(
        u=sql.Literal(probe.user_id), a=sql.Literal(AGENT_ID), p=sql.Literal(probe.project_id),
        q=sql.Literal(qvec.to_text()), e=sql.Literal(embedder.name), mf=sql.Literal(MAX_FACTS),
        w=sql.Literal(WINDOW), k=sql.Literal(RECALL_K), mc=sql.Literal(MIN_CHARS)).as_string(conn)
    out["context_read_call"] = common.explain(conn, call)
    with pymem.connect(dsn) as side:
        cur = side.cursor()
        for name, user in (("probe", probe), ("heavy_user", heavy)):
            if user is None:
                continue
            p = context_params(user, qvec, embedder.name)
            nested = common.nested_plans(side, lambda p=p: cur.execute(Q["context_read"], p).fetchall())
            if nested is None:
                out[f"context_read_nested_{name}"] = {"error": "auto_explain is not available to this role"}
            else:
                out[f"context_read_nested_{name}"] = {"statements": summarize_nested(nested, user.messages),
                                                      "plans": nested}
    recall_body = _function_body(conn, "pymem._recall_ranked")
    unembedded_body = _function_body(conn, "pymem._messages_unembedded")
    for name, user in (("probe", probe), ("heavy_user", heavy)):
        if user is None:
            continue
        values = {"p_project_id": user.project_id, "p_user_id": user.user_id, "p_thread_id": "default",
                  "p_query": qvec, "p_embedder": embedder.name, "p_limit": RECALL_K + 20, "p_min_chars": MIN_CHARS,
                  "p_window": WINDOW, "p_rw": 0.0, "p_iw": 0.0, "p_half_life": 3600.0}
        e = common.explain(conn, _with_literals(conn, recall_body, values))
        e["sorts"] = _sort_inputs(e["plan"]["Plan"])
        out[f"recall_ranked_{name}"] = e
        values = {"p_project_id": user.project_id, "p_user_id": user.user_id, "p_embedder": embedder.name,
                  "p_min_chars": MIN_CHARS, "p_limit": 1000}
        out[f"messages_unembedded_{name}"] = common.explain(conn, _with_literals(conn, unembedded_body, values))
    return out


# --- measurements ----------------------------------------------------------------------------


def measurements(conn: psycopg.Connection, db: pymem.Database, probe: User, light: User | None,
                 heavy: User | None, args: argparse.Namespace, token: str) -> dict[str, dict[str, Any]]:
    n, w = args.iterations, args.warmup
    real = HashEmbedder()
    queries = PROBE_QUERIES
    qvecs = [Vector(v) for v in real.embed(queries)]
    turn_texts = [t for pair in TURNS for t in pair]
    cheap = PrecomputedEmbedder(real, queries + turn_texts)
    mem_cheap = pymem.Memory(agent_id=AGENT_ID, project_id=probe.project_id, embedder=cheap, db=db)
    mem_hash = pymem.Memory(agent_id=AGENT_ID, project_id=probe.project_id, embedder=real, db=db)
    out: dict[str, dict[str, Any]] = {}
    cur = conn.cursor(row_factory=dict_row)

    hw = min(w, HEAVY_WARMUP)  # the heaviest user's measurements

    def run(name: str, fn, iterations: int = n, warmup: int | None = None, **kw) -> None:
        wu = w if warmup is None else warmup
        common.progress(f"measuring {name} ({wu} warm-up + {iterations} timed)")
        out[name] = common.measure(fn, iterations, wu, **kw)
        r = out[name]
        common.progress(f"  {name}: p50 {r['p50_ms']:.3f} ms, p95 {r['p95_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms")

    common.progress(f"measuring floor ({w} warm-up + {n} timed)")
    out["floor"] = common.floor(conn, n, w)
    commit = common.commit_floor(conn, n, w)
    if commit is not None:
        out["floor_commit"] = commit

    def pool_select1(i: int) -> None:
        with db.connection() as c:
            c.execute("SELECT 1", prepare=True).fetchone()

    run("floor_pool", pool_select1)

    # --- context for the probe ---------------------------------------------------------
    def ctx_sql(user: User):
        def once(i: int) -> Any:
            return cur.execute(Q["context_read"], context_params(user, qvecs[i % len(qvecs)], real.name)).fetchall()
        return once

    first = ctx_sql(probe)(0)[0]["context"]
    assert len(first["user_facts"]) == min(MAX_FACTS, PROBE_FACTS), len(first["user_facts"])
    assert len(first["agent_facts"]) == AGENT_FACTS and len(first["window"]) == WINDOW
    assert first["unembedded"] == [] and len(first["recalled"]) + first["deduped"] >= RECALL_K - first["deduped"]
    run("context_embed_query", lambda i: real.embed([queries[i % len(queries)]]))
    run("context_sql", ctx_sql(probe))
    got = mem_cheap.read(queries[0], user=probe.user_id)
    assert got.recalled and len(got.user_facts) == min(MAX_FACTS, PROBE_FACTS) and len(got.window) == WINDOW
    run("context_memory", lambda i: mem_cheap.context(queries[i % len(queries)], user=probe.user_id))
    run("context_memory_hash", lambda i: mem_hash.context(queries[i % len(queries)], user=probe.user_id))
    for mode in ("force_generic_plan", "force_custom_plan"):
        conn.execute(f"SET plan_cache_mode = {mode}")
        try:
            run(f"context_sql_{mode.removeprefix('force_').removesuffix('_plan')}", ctx_sql(probe))
        finally:
            conn.execute("RESET plan_cache_mode")
    # what context_read is made of, each part as its own statement (one round trip each)
    newest = {"scope": "user", "scope_id": probe.user_id, "project_id": probe.project_id, "max_facts": MAX_FACTS}
    run("part_user_facts", lambda i: cur.execute(Q["facts_newest"], newest).fetchall())
    agent = newest | {"scope": "agent", "scope_id": AGENT_ID}
    run("part_agent_facts", lambda i: cur.execute(Q["facts_newest"], agent).fetchall())
    run("part_summary", lambda i: cur.execute(Q["summary_read"], probe.where()).fetchall())
    window = probe.where() | {"max_messages": WINDOW}
    run("part_window", lambda i: cur.execute(Q["window_read"], window).fetchall())
    ranked = ("SELECT * FROM pymem._recall_ranked(%(project_id)s, %(user_id)s, %(thread_id)s, %(query)s, "
              "%(embedder)s, %(limit)s, %(min_chars)s, %(window)s, 0, 0, 3600)")
    run("part_recall_ranked", lambda i: cur.execute(ranked, probe.where() | {
        "query": qvecs[i % len(qvecs)], "embedder": real.name, "limit": RECALL_K + 20, "min_chars": MIN_CHARS,
        "window": WINDOW}).fetchall())
    unemb = ("SELECT * FROM pymem._messages_unembedded(%(project_id)s, %(user_id)s, %(embedder)s, %(min_chars)s, "
             "%(limit)s)")
    run("part_unembedded", lambda i: cur.execute(unemb, {
        "project_id": probe.project_id, "user_id": probe.user_id, "embedder": real.name, "min_chars": MIN_CHARS,
        "limit": 1000}).fetchall())

    # --- context for a light user and for the heaviest one ------------------------------
    if light is not None:
        first = ctx_sql(light)(0)[0]["context"]
        assert first["unembedded"] == [], "the light user must have every message embedded"
        run("context_sql_light_user", ctx_sql(light))
        run("context_memory_light_user", lambda i: mem_cheap.context(queries[i % len(queries)], user=light.user_id))
    if heavy is not None:
        assert not ctx_sql(heavy)(0)[0]["context"]["unembedded"], "catch_up() first"
        mem_heavy = pymem.Memory(agent_id=AGENT_ID, project_id=heavy.project_id, embedder=cheap, db=db)
        hi = min(n, args.heavy_iterations)
        run("context_sql_heavy_user", ctx_sql(heavy), hi, hw)
        run("context_memory_heavy_user",
            lambda i: mem_heavy.read(queries[i % len(queries)], user=heavy.user_id), hi, hw)

    # --- recall alone -------------------------------------------------------------------
    def recall(user: User, **over: Any):
        def once(i: int) -> Any:
            return cur.execute(Q["messages_recall"], recall_params(user, qvecs[i % len(qvecs)], real.name,
                                                                   **over)).fetchall()
        return once

    assert len(recall(probe)(0)) == RECALL_K
    run("recall_sql", recall(probe))
    assert len(recall(probe, **WEIGHTED)(0)) == RECALL_K
    run("recall_sql_weighted", recall(probe, **WEIGHTED))
    if heavy is not None:
        run("recall_sql_heavy_user", recall(heavy), min(n, args.heavy_iterations), hw)

    # --- turn writes --------------------------------------------------------------------
    # To threads of the probe named bench-<token>-..., a new one every TURNS_PER_THREAD turns
    # (a turn's cost grows with its thread's length, see turn_growth); deleted afterwards.
    pairs = TURNS
    pair_vecs = [(Vector(u), Vector(a)) for u, a in (real.embed(list(p)) for p in pairs)]

    def thread_of(tag: str, i: int) -> str:
        return f"bench-{token}-{tag}-{(i + w) // TURNS_PER_THREAD}"

    def turn_params(user: User, thread: str, i: int) -> dict[str, Any]:
        (q, a), (qv, av) = pairs[i % len(pairs)], pair_vecs[i % len(pairs)]
        return user.where(thread) | {
            "user_content": q, "assistant_content": a, "user_importance": 1.0, "assistant_importance": 1.0,
            "embedder": real.name, "user_embedding": qv, "assistant_embedding": av, "learned": None,
            "max_learned": 200, "keep_last": 10, "summarize_every": None, "lease_seconds": 300.0}

    try:
        run("turn_embed", lambda i: real.embed(list(pairs[i % len(pairs)])))
        run("turn_sql", lambda i: cur.execute(Q["turn_record"],
                                              turn_params(probe, thread_of("sql", i), i)).fetchall())
        run("turn_memory", lambda i: mem_hash.record(*pairs[i % len(pairs)], user=probe.user_id,
                                                     thread=thread_of("memory", i)))
        run("turn_memory_precomputed", lambda i: mem_cheap.record(*pairs[i % len(pairs)], user=probe.user_id,
                                                                  thread=thread_of("precomputed", i)))
        if heavy is not None:
            # appended to the heaviest user's longest thread, then taken back out
            thread, last_seq, updated_at = conn.execute(
                "SELECT thread_id, last_seq, updated_at FROM pymem.threads WHERE project_id = %s AND user_id = %s "
                "ORDER BY last_seq DESC, thread_id LIMIT 1", (heavy.project_id, heavy.user_id)).fetchone()
            try:
                run("turn_sql_heavy_user_thread", lambda i: cur.execute(
                    Q["turn_record"], turn_params(heavy, thread, i)).fetchall(), min(n, args.heavy_iterations),
                    hw)
                out["turn_sql_heavy_user_thread"]["thread_messages"] = last_seq
            finally:
                conn.execute("DELETE FROM pymem.messages WHERE project_id = %s AND user_id = %s AND thread_id = %s "
                             "AND seq > %s", (heavy.project_id, heavy.user_id, thread, last_seq))
                conn.execute("UPDATE pymem.threads SET last_seq = %s, updated_at = %s WHERE project_id = %s "
                             "AND user_id = %s AND thread_id = %s",
                             (last_seq, updated_at, heavy.project_id, heavy.user_id, thread))
        # one thread that grows: the cost of a turn against the length of its thread
        common.progress(f"measuring turn_growth ({args.growth_turns} turns into one thread)")
        growth = f"bench-{token}-growth"
        samples = common.measure(lambda i: cur.execute(Q["turn_record"], turn_params(probe, growth, i)).fetchall(),
                                 args.growth_turns, 0)["_samples_ns"]
        block = max(1, args.growth_block)
        out["_turn_growth"] = {"blocks": [
            {"thread_messages_before": 2 * lo, **{k: v for k, v in common.summarize(samples[lo:lo + block]).items()
                                                  if k in ("iterations", "p50_ms", "p95_ms", "p99_ms", "mean_ms")}}
            for lo in range(0, len(samples), block)]}
        for b in out["_turn_growth"]["blocks"]:
            common.progress(f"  thread of {b['thread_messages_before']:>6,} messages: p50 {b['p50_ms']:.3f} ms, "
                            f"p99 {b['p99_ms']:.3f} ms")
    finally:
        deleted = conn.execute("DELETE FROM pymem.threads WHERE project_id = %s AND user_id = %s "
                               "AND thread_id LIKE %s RETURNING last_seq",
                               (probe.project_id, probe.user_id, f"bench-{token}-%")).fetchall()
        common.progress(f"deleted the {len(deleted)} threads ({sum(r[0] for r in deleted):,} messages) the "
                        "measured turns wrote")
    out["_cheap_embedder_misses"] = {"misses": cheap.misses}
    return out


def catch_up(db: pymem.Database, user: User) -> int:
    """Memory's catch-up for a user with messages that have no vector (``--unembedded``):
    HashEmbedder vectors for them (up to 1000 per read), so that every measured read of that
    user is complete. Returns the number of reads that embedded something."""
    embedder = HashEmbedder(DIM)
    mem = pymem.Memory(agent_id=AGENT_ID, project_id=user.project_id, embedder=embedder, db=db)
    probe_vec = Vector(embedder.embed([PROBE_QUERIES[0]])[0])
    reads = 0
    for _ in range(50):
        with db.connection() as c:
            rows = c.cursor(row_factory=dict_row).execute(
                Q["context_read"], context_params(user, probe_vec, embedder.name, k=1)).fetchall()
        if not rows[0]["context"]["unembedded"]:
            break
        mem.read(PROBE_QUERIES[0], user=user.user_id)
        reads += 1
    return reads


# --- concurrent turn writes --------------------------------------------------------------------


def concurrency(dsn: str, project: str, token: str, levels: list[int], turns: int, warmup: int) -> dict[str, Any]:
    """``turns`` turn_record calls (precomputed vectors) by each of N client threads, each on its
    own connection, writing to a user of its own (a new thread every TURNS_PER_THREAD turns);
    throughput = all turns / wall time."""
    real = HashEmbedder()
    vecs = [(Vector(u), Vector(a)) for u, a in (real.embed(list(p)) for p in TURNS)]
    out: dict[str, Any] = {}
    for level in levels:
        users = [f"bench-conc-{token}-{level}-{t}" for t in range(level)]
        conns = [pymem.connect(dsn) for _ in range(level)]
        samples: list[list[int]] = [[] for _ in range(level)]
        errors: list[BaseException] = []
        start = threading.Barrier(level + 1)

        def worker(t: int) -> None:
            try:
                cur = conns[t].cursor()

                def params(i: int) -> dict[str, Any]:
                    (q, a), (qv, av) = TURNS[i % len(TURNS)], vecs[i % len(TURNS)]
                    return {"user_id": users[t], "thread_id": f"t{(i + warmup) // TURNS_PER_THREAD}",
                            "project_id": project,
                            "user_content": q, "assistant_content": a, "user_importance": 1.0,
                            "assistant_importance": 1.0, "embedder": real.name, "user_embedding": qv,
                            "assistant_embedding": av, "learned": None, "max_learned": 200, "keep_last": 10,
                            "summarize_every": None, "lease_seconds": 300.0}

                for i in range(warmup):
                    cur.execute(Q["turn_record"], params(i)).fetchall()
                start.wait()
                clock = time.perf_counter_ns
                mine = samples[t]
                for i in range(turns):
                    p = params(i)
                    t0 = clock()
                    cur.execute(Q["turn_record"], p).fetchall()
                    mine.append(clock() - t0)
            except BaseException as exc:  # reported after the join
                errors.append(exc)
                start.abort()

        threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(level)]
        for th in threads:
            th.start()
        try:
            start.wait()
        except threading.BrokenBarrierError:
            pass
        wall0 = time.perf_counter_ns()
        for th in threads:
            th.join()
        wall = time.perf_counter_ns() - wall0
        try:
            if errors:
                raise errors[0]
            merged = [s for per in samples for s in per]
            r = common.summarize(merged, wall, warmup=warmup)
            r["threads"] = level
            r["turns_per_thread"] = turns
            r["messages_per_s"] = round(2 * r["throughput_per_s"], 1)
            out[str(level)] = r
            common.progress(f"  {level} writer(s): {r['throughput_per_s']:,.0f} turns/s, p50 {r['p50_ms']:.3f} ms, "
                            f"p99 {r['p99_ms']:.3f} ms")
        finally:
            for c, u in zip(conns, users, strict=True):
                c.execute(Q["conversation_forget"], {"user_id": u, "thread_id": "*", "project_id": project})
                c.close()
    return out


# --- exact scan vs HNSW ----------------------------------------------------------------------

HNSW_INDEX = "bench_message_embeddings_hnsw"

TOPK_TEMPLATE = """SELECT e.thread_id, e.seq, (e.embedding::vector(@dim) <=> {q}::vector(@dim))::float8 AS distance
  FROM pymem.message_embeddings AS e
 WHERE e.project_id = {project_id} AND e.user_id = {user_id} AND e.embedder = {embedder}
 ORDER BY e.embedding::vector(@dim) <=> {q}::vector(@dim)
 LIMIT {k}"""


def topk_sql(dim: int) -> str:
    """The top-k query with psycopg parameters."""
    return TOPK_TEMPLATE.replace("@dim", str(dim)).format(
        q="%(q)s", project_id="%(project_id)s", user_id="%(user_id)s", embedder="%(embedder)s", k="%(k)s")


def topk_literal(conn: psycopg.Connection, dim: int, user: User, embedder: str, q: Vector, k: int) -> str:
    """The top-k query with literals (for EXPLAIN)."""
    return sql.SQL(TOPK_TEMPLATE.replace("@dim", str(dim))).format(
        q=sql.Literal(q.to_text()), project_id=sql.Literal(user.project_id), user_id=sql.Literal(user.user_id),
        embedder=sql.Literal(embedder), k=sql.Literal(k)).as_string(conn)


def _recall_at_k(exact: list[tuple], got: list[tuple], k: int) -> float:
    """How many of the exact top-k ``got`` returned, over k. A returned row whose distance ties
    the exact k-th (within 1e-9) counts too: a tie at the boundary may pick either row."""
    want = {(r[0], r[1]) for r in exact}
    kth = exact[-1][2] if exact else 0.0
    hits = sum(1 for r in got if (r[0], r[1]) in want or r[2] <= kth + 1e-9)
    return min(hits, len(exact)) / k if k else 1.0


def hnsw_compare(dsn: str, subjects: list[User], embedder: HashEmbedder, args: argparse.Namespace) -> dict[str, Any]:
    """The same top-k query on one user's vectors: an exact scan (the message_embeddings primary
    key + top-N sort, no HNSW index), then with an HNSW index on (embedding::vector(384)) under
    iterative_scan off / relaxed_order / strict_order and several ef_search: latency and recall@k
    against the exact answer. The index exists only during this comparison."""
    k = args.hnsw_k
    topk = topk_sql(embedder.dimension)
    qtexts = (PROBE_QUERIES * (args.hnsw_queries // len(PROBE_QUERIES) + 1))[: args.hnsw_queries]
    rng = random.Random(args.seed)
    # distinct queries: the probe's questions, reworded with a topic word when repeated
    qtexts = [t if i < len(PROBE_QUERIES) else f"{t} {rng.choice(CITIES + INGREDIENTS + TABLES)}"
              for i, t in enumerate(qtexts)]
    qvecs = [Vector(v) for v in embedder.embed(qtexts)]
    iters, warm = args.hnsw_iterations, min(args.warmup, 10)
    result: dict[str, Any] = {"k": k, "queries": len(qvecs), "iterations": iters,
                              "index": None, "subjects": {}}
    with pymem.connect(dsn) as conn:
        conn.execute("SET statement_timeout = 0")
        conn.execute(f"DROP INDEX IF EXISTS pymem.{HNSW_INDEX}")

        def params(user: User, i: int) -> dict[str, Any]:
            return {"q": qvecs[i % len(qvecs)], "project_id": user.project_id, "user_id": user.user_id,
                    "embedder": embedder.name, "k": k}

        def run_variant(user: User) -> tuple[dict[str, Any], list[list[tuple]]]:
            answers = [conn.execute(topk, params(user, i), prepare=False).fetchall() for i in range(len(qvecs))]
            timing = common.measure(lambda i: conn.execute(topk, params(user, i), prepare=False).fetchall(),
                                    iters, warm)
            timing.pop("_samples_ns")
            return timing, answers

        def plan_of(user: User) -> dict[str, Any]:
            e = common.explain(conn, topk_literal(conn, embedder.dimension, user, embedder.name, qvecs[0], k))
            return {"node_types": e["node_types"], "indexes": e["indexes"], "execution_ms": e["execution_ms"],
                    "planning_ms": e["planning_ms"], "shared_hit_blocks": e["shared_hit_blocks"],
                    "shared_read_blocks": e["shared_read_blocks"],
                    "rows": e["plan"]["Plan"].get("Actual Rows"), "uses_hnsw": HNSW_INDEX in e["indexes"]}

        exact: dict[str, list[list[tuple]]] = {}
        for user in subjects:
            common.progress(f"HNSW comparison, {user.user_id}: exact scan ({warm} warm-up + {iters} timed)")
            timing, answers = run_variant(user)
            exact[user.user_id] = answers
            full = sum(1 for a in answers if len(a) == k)
            result["subjects"][user.user_id] = {
                "project_id": user.project_id, "vectors": user.messages,
                "variants": {"exact": {"settings": {"index": "primary key, no HNSW index"}, **timing,
                                       "recall_at_k": 1.0, "min_recall_at_k": 1.0,
                                       "queries_with_k_rows": full, "mean_rows": sum(map(len, answers)) / len(answers),
                                       "plan": plan_of(user)}}}
        # build the index
        common.progress("building the HNSW index (every vector of pymem.message_embeddings)")
        conn.execute("SET maintenance_work_mem = %s" % sql.Literal(args.hnsw_maintenance_work_mem).as_string(conn))
        conn.execute(f"SET max_parallel_maintenance_workers = {int(args.hnsw_workers)}")
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        t0 = time.perf_counter_ns()
        conn.execute(
            f"CREATE INDEX {HNSW_INDEX} ON pymem.message_embeddings USING hnsw "
            f"((embedding::vector({embedder.dimension})) vector_cosine_ops) "
            f"WITH (m = {int(args.hnsw_m)}, ef_construction = {int(args.hnsw_ef_construction)})")
        build_s = (time.perf_counter_ns() - t0) / 1e9
        size = conn.execute("SELECT pg_relation_size(%s::regclass)", (f"pymem.{HNSW_INDEX}",)).fetchone()[0]
        conn.execute("RESET maintenance_work_mem")
        conn.execute("RESET max_parallel_maintenance_workers")
        result["index"] = {
            "definition": conn.execute("SELECT pg_get_indexdef(%s::regclass)", (f"pymem.{HNSW_INDEX}",)).fetchone()[0],
            "build_seconds": round(build_s, 2), "bytes": size, "maintenance_work_mem": args.hnsw_maintenance_work_mem,
            "parallel_workers": args.hnsw_workers, "notices": notices}
        common.progress(f"HNSW index built in {build_s:.1f}s ({size / 2**20:,.0f} MiB)")
        try:
            conn.execute("ANALYZE pymem.message_embeddings")
            for user in subjects:
                # what the planner does with the index present and default settings
                conn.execute("RESET ALL")
                conn.execute("SET statement_timeout = 0")
                result["subjects"][user.user_id]["planner_default"] = plan_of(user)
            variants: list[tuple[str, dict[str, Any]]] = []
            for ef in args.hnsw_ef:
                variants.append((f"hnsw_off_ef{ef}", {"hnsw.iterative_scan": "off", "hnsw.ef_search": ef}))
            for mode in ("relaxed_order", "strict_order"):
                for ef in args.hnsw_ef:
                    variants.append((f"hnsw_{mode.split('_')[0]}_ef{ef}",
                                     {"hnsw.iterative_scan": mode, "hnsw.ef_search": ef}))
            variants.append((f"hnsw_relaxed_ef{args.hnsw_ef[0]}_max_scan_200k",
                             {"hnsw.iterative_scan": "relaxed_order", "hnsw.ef_search": args.hnsw_ef[0],
                              "hnsw.max_scan_tuples": 200_000}))
            for name, settings in variants:
                conn.execute("RESET ALL")
                conn.execute("SET statement_timeout = 0")
                conn.execute("SET enable_sort = off")  # the exact plan needs a Sort: this makes the HNSW scan win
                for key, value in settings.items():
                    shown = sql.Literal(value).as_string(conn) if isinstance(value, str) else int(value)
                    conn.execute(f"SET {key} = {shown}")
                for user in subjects:
                    common.progress(f"HNSW comparison, {user.user_id}: {name} ({warm} warm-up + {iters} timed)")
                    timing, answers = run_variant(user)
                    ex = exact[user.user_id]
                    recalls = [_recall_at_k(e, g, k) for e, g in zip(ex, answers, strict=True)]
                    result["subjects"][user.user_id]["variants"][name] = {
                        "settings": settings, **timing,
                        "recall_at_k": round(sum(recalls) / len(recalls), 4), "min_recall_at_k": min(recalls),
                        "queries_with_k_rows": sum(1 for a in answers if len(a) == k),
                        "mean_rows": sum(map(len, answers)) / len(answers), "plan": plan_of(user)}
                    v = result["subjects"][user.user_id]["variants"][name]
                    common.progress(f"  p50 {v['p50_ms']:.3f} ms, recall@{k} {v['recall_at_k']:.3f}, "
                                    f"{v['queries_with_k_rows']}/{len(qvecs)} queries with {k} rows")
        finally:
            conn.execute("RESET ALL")
            conn.execute(f"DROP INDEX IF EXISTS pymem.{HNSW_INDEX}")
            common.progress("HNSW index dropped")
    return result


# --- output ------------------------------------------------------------------------------------


def format_hnsw(h: dict[str, Any]) -> str:
    lines = []
    for uid, s in h["subjects"].items():
        lines.append(f"{uid} ({s['vectors']:,} messages), k={h['k']}, {h['queries']} queries:")
        head = f"  {'variant':<34} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9} {'recall@k':>9} {'k rows':>7} {'hnsw':>5}"
        lines += [head, "  " + "-" * (len(head) - 2)]
        for name, v in s["variants"].items():
            lines.append(f"  {name:<34} {v['p50_ms']:9.3f} {v['p95_ms']:9.3f} {v['p99_ms']:9.3f} "
                         f"{v['recall_at_k']:9.3f} {v['queries_with_k_rows']:>3}/{h['queries']:<3} "
                         f"{'yes' if v['plan']['uses_hnsw'] else 'no':>5}")
    return "\n".join(lines)


def format_concurrency(c: dict[str, Any]) -> str:
    head = f"{'writers':>7} {'turns/s':>9} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9}"
    lines = [head, "-" * len(head)]
    for level, r in c.items():
        lines.append(f"{level:>7} {r['throughput_per_s']:9.0f} {r['p50_ms']:9.3f} {r['p95_ms']:9.3f} "
                     f"{r['p99_ms']:9.3f}")
    return "\n".join(lines)


# --- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    common.set_quiet(args.quiet)
    started = datetime.now(UTC)
    dsn, where = common.connection_info(args.dsn)
    common.progress(f"database: {where}")
    pymem.migrate(dsn)
    embedder = HashEmbedder(DIM)
    token = datetime.now(UTC).strftime("%Y%m%d%H%M%S") + "-" + secrets.token_hex(3)
    result: dict[str, Any] = {
        "benchmark": "conversations",
        "command": common.command_line("bench/conversations.py", argv),
        "started_at": started.isoformat(),
        "connection": where,
        "git_revision": common.git_revision(),
        "config": {k: v for k, v in vars(args).items() if k not in ("dsn",)},
    }
    probe = User(PROBE_PROJECT, PROBE_ID)
    with pymem.connect(dsn) as conn:
        result["environment"] = common.environment(conn)
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET statement_timeout = 0")
        conn.execute(f"SET work_mem = {sql.Literal(args.work_mem).as_string(conn)}")
        conn.execute(f"DROP INDEX IF EXISTS pymem.{HNSW_INDEX}")  # left over by an interrupted run
        if args.fresh and not args.skip_generate:
            common.progress("truncating the conversation and fact tables")
            conn.execute("TRUNCATE pymem.message_embeddings, pymem.messages, pymem.threads, "
                         "pymem.fact_embeddings, pymem.facts RESTART IDENTITY")
        if not args.skip_generate:
            present = [t for t, has in table_rows(conn).items() if has]
            if present:
                raise SystemExit(f"pymem.{', pymem.'.join(present)} already hold rows: pass --fresh (which deletes "
                                 "them) or --skip-generate")
            t0 = time.perf_counter_ns()
            gen_facts = generate_facts(conn, args, embedder)
            common.progress(f"generating {args.messages:,} messages for {args.users:,} user ids")
            gen_messages = generate_messages(conn, args, embedder)
            total = (time.perf_counter_ns() - t0) / 1e9
            result["generation"] = {"facts": gen_facts, "messages": gen_messages, "total_seconds": round(total, 2)}
            common.progress(f"generation: {gen_messages['messages']:,} messages in {gen_messages['seconds']:.1f}s, "
                            f"{gen_facts['rows']:,} facts in {gen_facts['seconds']:.1f}s; {total:.1f}s in all")
        common.progress("collecting dataset statistics")
        result["dataset"] = dataset(conn)
        if not args.no_verify:
            common.progress("checking integrity (every CHECK, last_seq, copied columns, vectors, embedded_by)")
            result["integrity"] = integrity(conn, embedder.name, embedder.dimension)
            common.progress(f"integrity ok: {result['integrity']['ok']}")
        before = user_counts(conn, probe, embedder.name)
        if before["messages"] == 0:
            raise SystemExit("the probe user has no messages: generate them first (drop --skip-generate)")
        if not args.skip_generate and before["messages"] != args.probe_messages:
            raise SystemExit(f"the probe user has {before['messages']} messages, not {args.probe_messages}")
        probe = User(PROBE_PROJECT, PROBE_ID, before["messages"])
        light = choose_light(conn)  # both GROUP BY every message: still without a statement timeout
        heavy = choose_heavy(conn)
        conn.execute("RESET work_mem")
        conn.execute("RESET synchronous_commit")
        conn.execute("RESET statement_timeout")
        result["light_user"] = {**asdict(light), **user_counts(conn, light, embedder.name)} if light else None
        result["heavy_user"] = {**asdict(heavy), **user_counts(conn, heavy, embedder.name)} if heavy else None
        common.progress(f"probe {before['messages']:,} messages; light user {light and light.user_id} "
                        f"({light and light.messages} messages); heaviest {heavy and heavy.user_id} "
                        f"({heavy and heavy.messages:,} messages)")
        settings = pymem.Settings(dsn=dsn, pool_min_size=1, pool_max_size=1)
        with pymem.Database(settings, migrate=False) as db:
            if heavy is not None:
                reads = catch_up(db, heavy)
                result["heavy_user"]["catch_up_reads"] = reads
                if reads:
                    result["heavy_user"]["after_catch_up"] = user_counts(conn, heavy, embedder.name)
                    common.progress(f"heaviest user: {reads} catch-up read(s) embedded its messages without a vector")
            common.progress("EXPLAIN of context_read and of the statements inside it")
            qvec = Vector(embedder.embed([PROBE_QUERIES[0]])[0])
            result["explain"] = plans(conn, dsn, probe, heavy, embedder, qvec)
            meas = measurements(conn, db, probe, light, heavy, args, token)
        misses = meas.pop("_cheap_embedder_misses")
        result["turn_growth"] = meas.pop("_turn_growth")
        common.progress(f"concurrent turn writes: {args.concurrency} client threads x {args.concurrency_turns} turns")
        result["concurrency"] = concurrency(dsn, PROBE_PROJECT, token, args.concurrency, args.concurrency_turns,
                                            min(args.warmup, 20))
        if not args.no_hnsw:
            subjects = [probe] + ([heavy] if heavy is not None else [])
            result["hnsw"] = hnsw_compare(dsn, subjects, embedder, args)
        common.progress(f"measuring floor_end ({args.warmup} warm-up + {args.iterations} timed)")
        meas["floor_end"] = common.floor(conn, args.iterations, args.warmup)
        after = user_counts(conn, probe, embedder.name)
    result["probe"] = {**asdict(probe), "before": before, "after": after}
    result["precomputed_embedder_misses"] = misses["misses"]
    result["measurements"] = meas if args.samples else common.strip_samples(meas)
    result["finished_at"] = datetime.now(UTC).isoformat()
    env = result["environment"]
    print(f"{result['command']}  ({where}, {env['cpu_count']} cores, PostgreSQL {env['server_version']}, "
          f"pgvector {env['pgvector_version']})")
    print(common.format_table(result["measurements"]))
    print("turn_record into one growing thread (precomputed vectors):")
    for b in result["turn_growth"]["blocks"]:
        print(f"  thread of {b['thread_messages_before']:>7,} messages: p50 {b['p50_ms']:8.3f} ms  "
              f"p95 {b['p95_ms']:8.3f} ms  p99 {b['p99_ms']:8.3f} ms")
    print("concurrent turn writes (turn_record, precomputed vectors, one connection per thread):")
    print(format_concurrency(result["concurrency"]))
    if "hnsw" in result:
        print(f"exact scan vs HNSW (index built in {result['hnsw']['index']['build_seconds']:.1f}s):")
        print(format_hnsw(result["hnsw"]))
    for who in ("probe", "heavy_user"):
        nested = result["explain"].get(f"context_read_nested_{who}", {})
        if not nested.get("statements"):
            continue
        print(f"statements inside context_read ({who}; auto_explain ANALYZE, durations include nested statements):")
        for s in collapse_statements(nested["statements"]):
            flags = [f"Seq Scan on {', '.join(s['seq_scans'])}"] if s["seq_scan"] else []
            flags += [f"Sort of {x['input_rows']:.0f} rows" for x in s["sorts"] if x["input_rows"]]
            flags += s["whole_user_scans"]
            times = f"x{s['count']}" if s["count"] > 1 else ""
            print(f"  {s['duration_ms'] or 0:8.3f} ms {s['shared_hit_blocks'] or 0:>6} hit "
                  f"{s['shared_read_blocks'] or 0:>5} read {times:>4} {s['query'][:60]:<60} {'; '.join(flags)}")
    return common.finish("conversations", result, write=not args.no_write, results_dir=args.results_dir, where=where)


if __name__ == "__main__":
    main()

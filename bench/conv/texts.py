"""What the benchmark says: the probe's conversation, the pool other users' messages are made
of, the queries and the turns it times."""

from __future__ import annotations

import random
from typing import Any

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

"""The conversations benchmark, one module per step; ``python bench/conversations.py`` runs it
(that script's docstring says what it does, its flags are in args.py).

- config.py: the probe, the agent, Memory's defaults, the required measurements, ``User`` and
  the parameters of ``context_read`` / ``messages_recall``
- texts.py: the probe's conversation, the sentence pool, the queries and the timed turns
- args.py: the command line
- generate.py: facts and messages (with bench/conversations_generate.sql)
- dataset.py: what the tables hold; the light and the heaviest user
- integrity.py: every CHECK and reference over every row
- plans.py: EXPLAIN of context_read and of the statements inside it
- runner.py, measure.py, turns.py: the timed measurements (context, recall, turn writes)
- concurrency.py: concurrent turn writes
- hnsw.py: the exact scan against an HNSW index
- report.py: the printed tables
- main.py: ``main(argv)``, the steps in order
"""

"""pymem as the store of agent frameworks (optional extras, imported on their own):

* `pymem.integrations.langgraph` - ``PymemStore``, a LangGraph ``BaseStore``
  (``pip install '.[langgraph]'`` from a clone);
* `pymem.integrations.fastaiagent` - ``PymemFactStore``, the ``FactStore`` of the
  ``fastaiagent`` SDK (``pip install '.[fastaiagent]'`` from a clone).

Neither framework is a dependency of pymem: ``import pymem`` never imports them.
"""

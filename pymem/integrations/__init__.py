"""pymem as the store of agent frameworks (optional extras, imported on their own):

* :mod:`pymem.integrations.langgraph` - ``PymemStore``, a LangGraph ``BaseStore``
  (``pip install 'pymem-pg[langgraph]'``);
* :mod:`pymem.integrations.fastaiagent` - ``PymemFactStore``, the ``FactStore`` of the
  ``fastaiagent`` SDK (``pip install 'pymem-pg[fastaiagent]'``).

Neither framework is a dependency of pymem: ``import pymem`` never imports them.
"""

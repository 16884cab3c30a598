"""The memory budget's home (the rules: ``headrace._memory``, which re-exports its names).

- :mod:`.sizes`: byte counts (parse, format, a process's RSS, the default budget);
- :mod:`.ledger`: :class:`MemoryBudget`: the limit, the open accounts, the one lock, the ledger;
- :mod:`.account`: :class:`StageAccount`: one stage's bytes and the verbs its stage calls;
- :mod:`.admission`: whether a reservation may be taken now, the stall breaker's condition, wait timing;
- :mod:`.shares`: fair caps and the modelled share (a seeded shuffle's capacity);
- :mod:`.refusals`: when a reservation is a ``MemoryBudgetError`` instead of a wait or an overdraft;
- :mod:`.notices`: the overdraft and shrunk-stage warnings.
"""

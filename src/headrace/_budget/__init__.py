"""The memory budget's home (the rules: ``headrace._memory``, which re-exports its names; why they are so:
docs/design/budget.md).

- :mod:`.sizes`: byte counts (parse, format, a process's RSS, the default budget);
- :mod:`.ledger`: :class:`MemoryBudget`: the limit, the open accounts, the one lock, the ledger;
- :mod:`.account`: :class:`StageAccount`: one stage's bytes and the verbs its stage calls (reserve, try_reserve;
  release, move_to, hold, force, adjust), and :class:`Reservation`: what a reserve returns, and its verbs
  (settle, cancel, top_up, force);
- :mod:`.policy`: :class:`Policy`: the kinds of reservation a stage declares once (``ELEMENT``, ``READ_AHEAD``,
  ``WHOLE``, ``TOP_UP``, ``UNCAPPED``, ``WHOLE_UNCAPPED``);
- :mod:`.admission`: whether a reservation may be taken now, the stall breaker's condition, wait timing;
- :mod:`.shares`: fair caps and the modelled share (a seeded shuffle's capacity);
- :mod:`.refusals`: when a reservation is a ``MemoryBudgetError`` instead of a wait or an overdraft;
- :mod:`.notices`: the overdraft and shrunk-stage warnings.
"""

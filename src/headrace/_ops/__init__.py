"""The transformations, one module each (``map``, ``batch``, ``shuffle``, ...; the in-memory sources): a recipe
node (``XxxNode``, a :class:`~headrace._engine.recipe.DatasetNode`) and its private iterator. The machinery they
share (stages, replay, the worker pool, AUTOTUNE) is the engine, ``headrace._engine``, which never imports
them; nothing here imports ``headrace.Dataset`` (the facade above, ``headrace._dataset``)."""

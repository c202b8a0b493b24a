"""How people reach the library: the ``sparseeval`` command (:mod:`.cli`, one module per sub-command in
:mod:`.commands`), the exports for lm-eval (a ``--samples`` file or a task folder that prints the
estimate), the Hub model card, the served mode (:mod:`.serve`) and progress reporting.

May import every other part; nothing imports it (but ``pipelines/`` and the lm-eval task folders).
"""

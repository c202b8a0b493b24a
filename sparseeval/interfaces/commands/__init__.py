"""Sub-commands of the ``sparseeval`` CLI, one module each."""

"""The ground every part stands on: the declaration of every setting (:mod:`.settings`), the errors a
person reads (:mod:`.errors`) and the atomic file writes (:mod:`.atomic`).

Imports nothing of sparseeval; every other part may import it.
"""

__version__ = "0.1.0"

"""Results in and out: reading every supported format (:mod:`.readers`), validating it, storing it
transactionally in DuckDB (:mod:`.store`, the only place SQL is written), building the models x items
matrix (:mod:`.matrix`, :mod:`.matrix_store`), the sources (local folders and Hub repos), benchmark and
task names, answer sheets, the embedded synthetic leaderboard and the anchor sets' lifecycle.

May import :mod:`sparseeval.core` only: nothing here knows estimators, publication or people.
"""

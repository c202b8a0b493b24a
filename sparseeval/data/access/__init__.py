"""How the library opens results: any path or Hub source as a private store (:mod:`.sources`), the stored
matrices beside a store (:mod:`.matrix_store`), a user's answer sheets (:mod:`.answers`) and Hub repos of
results and of predictors.

May import the store, the readers and the rest of :mod:`sparseeval.data`.
"""

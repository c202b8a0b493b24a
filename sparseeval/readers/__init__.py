from sparseeval.readers.base import InputError, ParsedResults  # noqa: F401

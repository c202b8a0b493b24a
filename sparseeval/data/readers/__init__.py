from sparseeval.data.readers.base import InputError, ParsedResults  # noqa: F401

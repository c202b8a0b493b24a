"""sparseeval: estimate a language model's full-benchmark scores from a few anchor items."""

__version__ = "0.1.0"

"""The benches (``python bench/<name>.py`` from the repository root) and what they share with the tests."""

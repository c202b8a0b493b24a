"""Dagster layer of sparseeval: assets, resources, job, schedule and sensor (no algorithms)."""

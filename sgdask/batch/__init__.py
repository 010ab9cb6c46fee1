"""Batch work: many models at once, the submission registry, scheduled re-ranking."""

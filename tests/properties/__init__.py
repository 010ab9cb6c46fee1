"""Properties over generated inputs: invariants, invariance to partitioning, fuzzing."""

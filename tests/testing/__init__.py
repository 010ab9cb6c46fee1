"""Tests of `sgdask/testing` (the synthetic datasets)."""

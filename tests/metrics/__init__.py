"""Tests of `sgdask/metrics`."""

"""Tests of `sgdask/stats`."""

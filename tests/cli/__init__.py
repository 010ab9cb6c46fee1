"""Tests of `sgdask/cli`."""

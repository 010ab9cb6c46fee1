"""Tests of `sgdask/core`."""

"""Tests of `sgdask/batch`."""

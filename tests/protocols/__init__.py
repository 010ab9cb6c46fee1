"""Tests of `sgdask/protocols`."""

"""Tests of `sgdask/kernels`."""

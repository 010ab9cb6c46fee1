"""Tests of `sgdask/service`."""

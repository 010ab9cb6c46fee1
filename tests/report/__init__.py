"""Tests of `sgdask/report`."""

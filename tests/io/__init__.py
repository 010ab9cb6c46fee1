"""Tests of `sgdask/io`: readers, formats, stores, object stores and hostile input."""

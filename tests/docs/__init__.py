"""The documentation and the README are true to the code and the tree."""

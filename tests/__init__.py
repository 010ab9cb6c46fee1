"""sgdask's test suite: one folder per package layer (tests/<layer>/), shared helpers in
``tests.helpers``, the literal twins of the protocols in ``tests.literal``."""

"""The ``hetsplit`` command: thin wrappers that parse, call the library and print (docs/architecture.md)."""

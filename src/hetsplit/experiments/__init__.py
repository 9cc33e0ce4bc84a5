"""Experiment runners: they search and simulate, and return typed results.

Runners never draw; ``hetsplit.report`` turns their results into figures, tables and files. They call
``workflow`` and the packages below it, never the other way (docs/architecture.md).
"""

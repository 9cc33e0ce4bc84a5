"""Reports: tables, plots and the HTML report of plans and their metrics (no metrics of its own;
docs/architecture.md)."""

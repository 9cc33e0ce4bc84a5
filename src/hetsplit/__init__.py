"""hetsplit: plan, predict and run one neural network split across heterogeneous devices."""

__version__ = "0.1.0"

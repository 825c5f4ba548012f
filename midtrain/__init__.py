"""midtrain: an open midtraining stack for agentic software-engineering models."""

__version__ = "0.1.0"

"""InfraLens: build runnable, annotated code-reading labs into a static site."""

__version__ = "0.1.0"

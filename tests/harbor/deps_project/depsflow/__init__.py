"""A workflow package whose import needs its declared dependencies in the trial."""

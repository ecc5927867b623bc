"""Integrations of fijit with other libraries (transformers)."""

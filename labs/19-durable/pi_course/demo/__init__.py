"""Demonstrations that run offline: fixed data, no model, no network, no file access."""

"""The checks behind verify.py, one concern per module (see verify.py's docstring)."""

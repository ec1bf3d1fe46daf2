"""`make hub`: the course as a class on JupyterHub (see hub/classroom.py)."""

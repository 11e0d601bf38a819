"""One flat pass list per target (see sm90a.py)."""

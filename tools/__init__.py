"""Developer tools that are not part of the package (run as `python -m tools.<name>` from the repository top)."""

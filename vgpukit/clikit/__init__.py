"""The click toolkit every front end uses: the per-command context, output, parameter types, options."""

"""One module per command; each `run(api, command, terminal)` returns the exit code."""

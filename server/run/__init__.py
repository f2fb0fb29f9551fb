"""The command line, `serve`, the worker supervisor and the generated config docs."""

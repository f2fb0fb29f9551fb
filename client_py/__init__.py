"""transcript-sync's Python client."""

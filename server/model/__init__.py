"""The Transcript entity, change capture and fixed ranges."""

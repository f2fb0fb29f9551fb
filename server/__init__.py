"""transcript-sync's server side: the Transcript entity, the hub, the app, stores, CLI."""

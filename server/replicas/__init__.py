"""Working with other replicas through Redis: the backplane and the draft relay."""

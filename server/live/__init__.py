"""One process's delivery: the hub (registry and coordinator), live transcripts, the committer,
outbound queues, frames, baselines, drafts.
"""

"""Curation stages: deduplication (four keys) and clustering of validated problems."""

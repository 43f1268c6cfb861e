"""Tracks as the API shows them: the engine's torch-free catalog cards."""

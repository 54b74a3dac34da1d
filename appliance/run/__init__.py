"""A run, top down: planning what to play, the runner that plays and stores it, rescoring a stored run."""

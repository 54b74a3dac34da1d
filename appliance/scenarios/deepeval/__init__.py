"""DeepEval: models under test interact through a referee's message pool, in synchronous rounds."""

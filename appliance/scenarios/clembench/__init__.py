"""clembench: dialogue games under a programmatic game master (see docs/clembench.md)."""

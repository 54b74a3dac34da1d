"""The model catalog: models.toml's entries, the backends they name, how they sample, the judge panels."""

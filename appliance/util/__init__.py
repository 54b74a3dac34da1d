"""Small utilities below everything else: TOML and JSONL reading, statistics, agreement measures, number
formatting, self-registration."""

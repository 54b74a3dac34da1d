"""SimulateBench: a model plays a character from a long profile and answers single-choice questions about it."""

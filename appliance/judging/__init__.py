"""Judges: templates with parse rules, and panels that combine several judge models."""

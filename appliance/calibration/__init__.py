"""Calibrating judge panels against human labels: metrics, isotonic maps, held-out reports."""

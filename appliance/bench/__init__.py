"""`appliance bench`: fixed, seeded workloads measured against their baselines in one run."""

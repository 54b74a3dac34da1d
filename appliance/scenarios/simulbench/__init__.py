"""SimulBench: a user agent drives simulation tasks; challenging test scripts are extracted and judged."""

"""The `appliance` command line."""

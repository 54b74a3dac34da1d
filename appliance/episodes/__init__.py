"""What an episode sees and how its requests reach the models: its context, the seeded client, the
scheduler that batches the awaits of many episodes, and the pool of loaded models."""

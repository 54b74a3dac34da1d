"""Playing a run's episodes on a Ray cluster (`appliance run --ray`): the one-process runner never imports it."""

"""The worker, the only process that runs candidate code: its main loop, its group's other ranks, and the gate's tensor checks."""

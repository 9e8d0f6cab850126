"""Measurement, the harness's side: the session, the worker process, shared buffers, the channel, busy, memory and locks."""

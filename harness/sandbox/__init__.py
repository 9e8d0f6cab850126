"""The sandbox: the worker's boundary as one printable policy (what it sees, may write, its env, its GPUs) and the walls that enforce it."""

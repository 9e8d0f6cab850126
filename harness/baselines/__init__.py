"""The frozen baseline candidates every comparison starts from, run in a worker like any candidate; the target's adapter is all they use."""

"""The frozen baseline candidates every comparison starts from (the harness runs them in a worker
like any candidate). They use only the target's adapter, so they serve any target."""

"""The toy target's model package (its adapter is toymodel.target, named by goals.json)."""

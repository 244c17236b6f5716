"""The cost formula (cost per million SLO-qualified tokens on whole replicas, KV capacity) and the seed's
theoretical worksheet."""

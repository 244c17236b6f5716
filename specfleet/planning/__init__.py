"""What a sweep will take before and while it runs: its time and cost estimate, the timing sources, the budget,
which cells go first, baseline replicas, the cells a budget left out."""

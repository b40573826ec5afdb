"""Code generation for the graph: lowering fused groups, the executor plan and the built library."""

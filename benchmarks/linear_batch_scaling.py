"""Whether this CPU's matrix kernels cost more for a few rows than for more (issue 32).

    .venv/bin/python -m benchmarks.linear_batch_scaling [--rows 1,2,3,4,6,8,12,16] [--threads N]

The performance model's step law is linear and non-negative in what a step processes: a step
with more sequences never runs faster. On some CPUs PyTorch runs a matrix product with one to
three rows on a slower path than one with four or more, so a decode step of one or two
sequences (or a verification of few draft tokens) costs as much as, or more than, one of four,
and the law fitted on other batch sizes misses it (docs/benchmarks.md, "Performance model
accuracy"). This times one MLP layer of the wide fixture target (hidden 256, gate and up
projections to 2 x 24,576 units, down to 256; float32, as ``torch.nn.functional.linear`` computes
it; the target has four) at each row count: the time per layer and per row. Run it alone:
another job on the cores changes the figures.
"""

import argparse
import os
import time

import torch

from benchmarks.results_record import write_result

HIDDEN = 256
INTERMEDIATE = 24_576
"""The wide fixture target's MLP (tasks/fixtures/wide.py, on the fixture target's hidden size)."""


def mlp(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    gate, up = torch.nn.functional.linear(x, gate_up).chunk(2, dim=-1)
    return torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, down)


def time_ms(rows: int, gate_up: torch.Tensor, down: torch.Tensor, repeats: int) -> float:
    x = torch.randn(rows, HIDDEN)
    for _ in range(3):  # warm-up: the first calls pick and prepare the kernel
        mlp(x, gate_up, down)
    start = time.perf_counter()
    for _ in range(repeats):
        mlp(x, gate_up, down)
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,2,3,4,6,8,12,16", help="row counts (tokens in the step)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gate_up, down = torch.randn(2 * INTERMEDIATE, HIDDEN), torch.randn(HIDDEN, INTERMEDIATE)
    print(f"torch {torch.__version__}, {args.threads} threads, one MLP layer {HIDDEN} -> 2 x {INTERMEDIATE} -> "
          f"{HIDDEN}, float32")
    print("| rows | ms per layer | ms per row |")
    print("| --- | --- | --- |")
    figures: dict[str, float | None] = {}
    for rows in (int(r) for r in args.rows.split(",")):
        ms = time_ms(rows, gate_up, down, args.repeats)
        figures[f"ms_per_layer_at_{rows}_rows"] = ms
        print(f"| {rows} | {ms:.2f} | {ms / rows:.2f} |")
    write_result("linear_batch_scaling", "none: whether this CPU's matrix kernels take a slower path for few rows",
                 None, figures, note=f"{args.threads} threads, torch {torch.__version__}")


if __name__ == "__main__":
    main()

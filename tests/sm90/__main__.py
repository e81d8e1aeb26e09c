"""`python -m tests.sm90 [OP ...]`: registers, spills, shared memory and the
widest global accesses of every CUDA-like kernel compiled for sm_90."""

from __future__ import annotations

import sys

from tests.sm90 import all_examples, compile_example, inspect_compiled


def main(selected: list[str]) -> int:
    examples = all_examples()
    print(
        "| operator | example | kind | kernel | registers | spills (B) | "
        "shared (B) | widest load (bit) | widest store (bit) | mma |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for op in sorted(examples):
        if selected and op not in selected:
            continue
        for number, example in enumerate(examples[op]):
            for compiled in compile_example(op, example):
                report = inspect_compiled(compiled)
                print(
                    f"| {op} | {example.label or number} | {example.kind} | "
                    f"{report.name} | {report.registers} | {report.spill_bytes} | "
                    f"{report.shared_bytes} | {report.widest_load} | "
                    f"{report.widest_store} | {'yes' if report.tensor_cores else ''} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

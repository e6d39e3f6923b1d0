"""Instruction budgets of kgen's AMD kernels, counted from their disassembly.

A code-size or schedule regression shows deviceless as more instructions: per kernel, the whole
kernel's instructions, MFMAs, `ds_read_u16` (single-element LDS gathers) and `s_waitcnt`, and the
same in its main loop, the loop (a backward branch and the code it jumps over) that holds the most
MFMAs, with the loop's non-MFMA instructions per MFMA (issue 50's measure). The budgets are stored
in tests/amdemu/instruction_budgets.json; the tier fails when a count grows past its budget by more
than the tolerance. A kernel change that is meant to cost instructions, or that saves some,
rewrites the file in the same commit:

    KGEN_BIN=build/bin/kgen python3 tools/amdemu/budgets.py --update
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass

import kgen_driver as kd
from disasm import Instruction, disassemble

BUDGET_FILE = os.path.join(kd.REPO, "tests", "amdemu", "instruction_budgets.json")
# A count may exceed its budget by this fraction or by SLACK_ABS instructions, whichever is more
# (the same compiler gives the same code; the slack absorbs small template edits).
SLACK_REL = 0.03
SLACK_ABS = 2


@dataclass(frozen=True)
class BudgetVariant:
    """One kgen variant whose kernels have budgets (config None: kgen's default)."""
    arch: str
    op: str
    variant: str
    config: str | None = None


# The MFMA defaults of every AMD target: the forward (bf16 and fp16, d = 64 and 128, full and
# causal) and the backward's kernels in both modes (atomic: preprocess, kv_atomic, dq_convert;
# deterministic: kv, dq).
VARIANTS = [BudgetVariant(arch, op, variant)
            for arch in ("gfx90a", "gfx942", "gfx950")
            for op, variant in (("attention_fwd", "attention_fwd.bf16.d128.full"),
                                ("attention_fwd", "attention_fwd.fp16.d64.causal"),
                                ("attention_fwd", "attention_fwd.fp16.d128.causal"),
                                ("attention_fwd", "attention_fwd.bf16.d64.full"),
                                ("attention_bwd", "attention_bwd.bf16.d128.causal"),
                                ("attention_bwd", "attention_bwd.bf16.d128.causal.deterministic"))]


def _is_mfma(ins: Instruction) -> bool:
    return ins.opcode.startswith("v_mfma")


def _branch_target(ins: Instruction) -> int | None:
    if ins.opcode != "s_branch" and not ins.opcode.startswith("s_cbranch_"):
        return None
    simm = ins.operands[0].index
    simm = simm - 0x10000 if simm & 0x8000 else simm
    return ins.addr + 4 + 4 * simm


def main_loop(instructions: list[Instruction]) -> list[Instruction]:
    """The instructions of the innermost loop with the most MFMAs (the shorter one on a tie);
    empty when no loop holds an MFMA. A loop: a branch back to an earlier address, and the code
    between. Innermost: no other loop holding an MFMA lies inside it (a kernel that runs its tile
    step in two loops, masked and unmasked, inside an outer loop is measured on the inner ones)."""
    index = {ins.addr: i for i, ins in enumerate(instructions)}
    loops = []  # (first, last index, MFMAs)
    for i, ins in enumerate(instructions):
        target = _branch_target(ins)
        if target is None or target > ins.addr or target not in index:
            continue
        n = sum(map(_is_mfma, instructions[index[target]:i + 1]))
        if n:
            loops.append((index[target], i, n))
    best: list[Instruction] = []
    best_mfma = 0
    for first, last, n in loops:
        if any(f >= first and l <= last and (f, l) != (first, last) for f, l, _ in loops):
            continue
        body = instructions[first:last + 1]
        if n > best_mfma or (n == best_mfma and len(body) < len(best)):
            best, best_mfma = body, n
    return best


def counts(instructions: list[Instruction]) -> dict[str, float]:
    def tally(ins_list):
        mfma = sum(map(_is_mfma, ins_list))
        return len(ins_list), mfma, sum(i.opcode == "ds_read_u16" for i in ins_list), \
            sum(i.opcode == "s_waitcnt" for i in ins_list)
    total, mfma, u16, wait = tally(instructions)
    loop = main_loop(instructions)
    l_total, l_mfma, l_u16, l_wait = tally(loop)
    return {"instructions": total, "mfma": mfma, "ds_read_u16": u16, "s_waitcnt": wait,
            "loop_instructions": l_total, "loop_mfma": l_mfma, "loop_ds_read_u16": l_u16, "loop_s_waitcnt": l_wait,
            "loop_non_mfma_per_mfma": round((l_total - l_mfma) / l_mfma, 3) if l_mfma else 0.0}


def measure(kgen_bin: str, v: BudgetVariant) -> list[dict]:
    """Each kernel of `v` kgen builds, with its counts, in `kgen inspect`'s order."""
    selector = ["--variant", v.variant]
    out = []
    for k in kd.build_kernels(kgen_bin, v.arch, v.op, selector, v.config):
        entry = k.meta["entry"]
        ins = disassemble(k.path, k.arch)[entry]
        out.append({"arch": v.arch, "variant": k.variant, "entry": entry, "compiler": k.meta.get("compiler", ""),
                    "counts": counts(ins)})
    return out


def over_budget(measured: dict[str, float], budget: dict[str, float]) -> list[str]:
    """The counts of `measured` above `budget` by more than the tolerance."""
    errs = []
    for name, limit in budget.items():
        got = measured.get(name)
        if got is None:
            errs.append(f"{name}: not measured")
        elif got > max(limit * (1 + SLACK_REL), limit + (0 if isinstance(limit, float) else SLACK_ABS)):
            errs.append(f"{name} {got} above its budget {limit}")
    return errs


def load_budgets() -> dict:
    with open(BUDGET_FILE) as f:
        return json.load(f)


def key(row: dict) -> str:
    return f"{row['arch']} {row['variant']} {row['entry']}"


def update(kgen_bin: str) -> None:
    rows = {}
    for v in VARIANTS:
        for row in measure(kgen_bin, v):
            rows[key(row)] = row
    doc = {"about": "instruction budgets of kgen's AMD kernels (tools/amdemu/budgets.py); rewrite with "
                    "`KGEN_BIN=build/bin/kgen python3 tools/amdemu/budgets.py --update`",
           "kernels": [rows[k] for k in sorted(rows)]}
    with open(BUDGET_FILE + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(BUDGET_FILE + ".tmp", BUDGET_FILE)


def _main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--update", action="store_true", help="rewrite tests/amdemu/instruction_budgets.json")
    args = p.parse_args()
    kgen_bin = os.environ.get("KGEN_BIN") or os.path.join(kd.REPO, "build", "bin", "kgen")
    why = kd.missing_tools(kgen_bin)
    if why:
        print(why, file=sys.stderr)
        return 1
    if args.update:
        update(kgen_bin)
        return 0
    budgets = {key(r): r for r in load_budgets()["kernels"]}
    bad = 0
    for v in VARIANTS:
        for row in measure(kgen_bin, v):
            b = budgets.get(key(row))
            errs = ["no budget"] if b is None else over_budget(row["counts"], b["counts"])
            bad += bool(errs)
            print(f"{key(row)}: {'; '.join(errs) or 'within budget'}  {row['counts']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(_main())

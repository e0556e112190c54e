#!/usr/bin/env python3
"""Dump torch.distributed.pipelining's schedule CSVs for pipecc's tests (run by hand).

    /path/to/venv/bin/python tests/torch/dump.py [OUTDIR]

Builds each schedule class on mock stages, as torch's own tests and its
_schedule_visualizer do (no process group: only the order is built), over the grid
p in {2, 4, 8}, m in {p, 2p, 3p, 8, 16}, two stages per rank for the multi-stage
classes, and writes for each configuration torch accepts:

  NAME-pP-mM.csv        the compute-only order (pipeline_order), as _dump_csv writes it
  NAME-pP-mM.comms.csv.gz  the compute_comms order, as _PipelineScheduleRuntime lowers
                        it and _dump_csv(format="compute_comms") writes it, gzipped
                        (deterministically) to keep the repository small

GPipe and 1F1B are single-stage classes with their own step(); their compute_comms
file is what _PipelineScheduleRuntime makes of their compute order (the lowering a
user gets by loading their CSV into the runtime).  VERSION records torch's version,
SKIPPED the configurations torch refuses and why.  Nothing here runs in make check.
"""
import csv
import gzip
import io
import os
import sys
from unittest import mock

import torch
from torch.distributed.pipelining import schedules as S
from torch.distributed.pipelining.stage import PipelineStage

CLASSES = ["GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble",
           "ZBVZeroBubble", "DualPipeV"]


def mock_stages(p, per_rank):
    st = mock.create_autospec(PipelineStage, instance=True)
    st.group_rank = 0
    st.group_size = p
    st.submod = None
    st.num_stages = per_rank * p
    return st, [st] * per_rank


def compute_order(name, p, m):
    cls = S.get_schedule_class(name)
    single = issubclass(cls, S.PipelineScheduleSingle)
    st, stages = mock_stages(p, 1 if single else 2)
    sched = cls(st if single else stages, m)
    return {r: list(sched.pipeline_order[r]) for r in range(p)}, stages


def comms_order(compute, stages, p, m):
    rt = S._PipelineScheduleRuntime(stages, m)
    # the runtime lowers compute actions only; it adds REDUCE_GRAD itself
    rt._prepare_schedule_with_comms(
        {r: [a for a in compute[r] if a is None or a.is_compute_op] for r in range(p)})
    return {r: list(rt.pipeline_order_with_comms[r]) for r in range(p)}


def write(path, order):
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    for r in sorted(order):
        w.writerow(order[r])
    data = buf.getvalue().encode()
    if path.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    with open(path, "wb") as f:
        f.write(data)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    ver = torch.__version__.split("+")[0]
    skipped, n, nc = [], 0, 0
    for name in CLASSES:
        for p in (2, 4, 8):
            for m in sorted({p, 2 * p, 3 * p, 8, 16}):
                base = os.path.join(out, f"{name}-p{p}-m{m}")
                try:
                    compute, stages = compute_order(name, p, m)
                except Exception as e:  # torch refuses the configuration
                    skipped.append(f"{name} p={p} m={m}: {type(e).__name__}: "
                                   f"{str(e).splitlines()[0][:160]}")
                    continue
                write(base + ".csv", compute)
                n += 1
                try:
                    comms = comms_order(compute, stages, p, m)
                except Exception as e:  # torch cannot lower its own order
                    skipped.append(f"{name} p={p} m={m} compute_comms: {type(e).__name__}: "
                                   f"{str(e).splitlines()[0][:160]}")
                    continue
                write(base + ".comms.csv.gz", comms)
                nc += 1
    with open(os.path.join(out, "VERSION"), "w") as f:
        f.write(f"torch {ver}\n")
    with open(os.path.join(out, "SKIPPED"), "w") as f:
        f.write("".join(s + "\n" for s in skipped))
    print(f"torch {ver}: {n} compute-only and {nc} compute_comms files, "
          f"{len(skipped)} refusals (SKIPPED)")


if __name__ == "__main__":
    main()

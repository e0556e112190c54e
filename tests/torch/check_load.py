#!/usr/bin/env python3
"""Load pipecc's --emit torch-csv --comms CSVs in torch (make check-torch; by hand).

    python3 tests/torch/check_load.py [BIN]

For each pipecc schedule torch has a runtime for and a grid of (p, m), writes a unit-cost
program, compiles it with BIN/pipecc --emit torch-csv --comms, and has torch's
_PipelineScheduleRuntime._load_csv(FILE, "compute_comms") load it on mock stages (as
torch's tests build schedules: no process group) and its _simulate_comms_compute dry-run it: it
raises on a send without a wait, a bad order or a deadlock.  Prints one line per CSV
and exits 1 if torch refused any.
"""
import os
import subprocess
import sys
import tempfile
from unittest import mock

import torch
from torch.distributed.pipelining import schedules as S
from torch.distributed.pipelining.stage import PipelineStage

# pipecc schedule -> stages per rank, placement
SCHEDULES = {"gpipe": (1, ""), "1f1b": (1, ""), "zbh1": (1, ""), "zbh2": (1, ""),
             "interleaved": (2, "loop"), "loopedbfs": (2, "loop"), "zbv": (2, "v"),
             "dualpipev": (2, "v")}


def program(p, n, m, sched, place):
    lines = [f"pipeline u;\nmesh pp={p};\nmicrobatches {m};\ninput 2x8;"]
    for i in range(n):
        lines.append(f"stage s{i} {{ linear 8; {'loss mse;' if i == n - 1 else 'relu;'} }}")
    lines.append(f"schedule {sched};\ncost * f=1 b=1 w=1;\nlink ideal;")
    if place:
        lines.append(f"placement {place};")
    return "\n".join(lines) + "\n"


def load(path, p, n, m):
    st = mock.create_autospec(PipelineStage, instance=True)
    st.group_rank, st.group_size, st.submod, st.num_stages = 0, p, None, n
    rt = S._PipelineScheduleRuntime([st] * (n // p), m)
    rt._load_csv(path, format="compute_comms")
    # torch 2.15's _simulate knows no REDUCE_GRAD (nor does it run torch's own lowering
    # with them): dry-run the rest
    keep = (S.REDUCE_GRAD, S.WAIT_REDUCE_GRAD, S.UNSHARD, S.RESHARD)
    order = {r: [a for a in acts if a.computation_type not in keep]
             for r, acts in rt.pipeline_order_with_comms.items()}
    S._simulate_comms_compute(order, lambda s: rt.stage_index_to_group_rank[s], n)


def main():
    binary = os.path.join(sys.argv[1] if len(sys.argv) > 1 else "bin", "pipecc")
    bad = n = 0
    with tempfile.TemporaryDirectory() as d:
        for sched, (v, place) in SCHEDULES.items():
            for p in (2, 4, 8):
                for m in sorted({p, 2 * p, 3 * p, 8, 16}):
                    src, csv = os.path.join(d, "u.pipe"), os.path.join(d, "u.csv")
                    with open(src, "w") as f:
                        f.write(program(p, v * p, m, sched, place))
                    r = subprocess.run([binary, src, "--emit", "torch-csv", "--comms", "-o", csv],
                                       capture_output=True, text=True)
                    if r.returncode:  # pipecc refuses the configuration (dualpipev m < 2p)
                        continue
                    n += 1
                    try:
                        load(csv, p, v * p, m)
                        print(f"torch {torch.__version__} loads {sched} p={p} m={m} ... ok")
                    except Exception as e:
                        bad += 1
                        print(f"torch {torch.__version__} loads {sched} p={p} m={m} ... FAILED: "
                              f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
    print(f"{n - bad} of {n} pipecc CSVs loaded and simulated by torch {torch.__version__}")
    return 1 if bad or n == 0 else 0


if __name__ == "__main__":
    sys.exit(main())

"""One training step under Horovod, as a rank started by mpirun (used by test_maskrcnn_horovod).

Each of 2 ranks takes 2 of the same 4 images the DDP test uses, runs forward/backward, lets
Horovod's DistributedOptimizer average the gradients, and rank 0 saves them to argv[2].
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch


def main(root: str, out: str) -> None:
    import horovod.torch as hvd

    from test_maskrcnn_ddp import _batch, _grads, _model

    torch.set_num_threads(1)
    hvd.init()
    model = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters())
    batch = _batch(Path(root))[2 * hvd.rank():2 * hvd.rank() + 2]
    sum(model(batch).values()).backward()
    opt.synchronize()  # the averaged gradients are now in .grad
    if hvd.rank() == 0:
        torch.save({"size": hvd.size(), "grads": _grads(model)}, out)
    hvd.shutdown()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main(sys.argv[1], sys.argv[2])

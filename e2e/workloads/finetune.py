"""Fine-tuning a pretrained-shaped residual network on a new image task (CPU), with the phases
of a real training job (see ``_job.py``). Nothing is downloaded: the "pretrained" weights are
made locally.

    python e2e/workloads/finetune.py --duration 200 --epochs 4 --freeze-epochs 2

``datagen`` stands for pulling a model from a hub and a data set from a bucket: it writes the
backbone's weights (a small ResNet, ~2.8 M parameters: ~11 MB) with ``torch.save`` and the
images as uint8 shards. ``preprocess`` loads the weights into a fresh backbone, decodes the
images, resizes them (bilinear) and normalises them with the data set's channel statistics.
Training first updates the new head only, the backbone frozen (``--freeze-epochs``: a light
backward, a small optimizer state); then the whole network is unfrozen at a lower learning
rate: CPU per step and the optimizer's memory both grow at that epoch.
"""

from __future__ import annotations

import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
import _job  # noqa: E402

NAME = "finetune"
CLASSES = 12
RAW, SIZE = 24, 32


def main(argv=None) -> int:
    p = _job.parser(__doc__.splitlines()[0])
    p.add_argument("--freeze-epochs", type=int, default=1, help="epochs with the backbone "
                   "frozen (default 1)")
    args = p.parse_args(argv)
    torch = _common.setup_torch(args.threads)
    import numpy as np
    from torch import nn
    from torch.nn import functional as F
    from torch.utils.data import Dataset

    rng = np.random.default_rng(args.seed)
    n_images = max(1000, int(8000 * args.scale))

    class Block(nn.Module):
        def __init__(self, c_in, c_out, stride):
            super().__init__()
            self.a = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
            self.bn_a = nn.BatchNorm2d(c_out)
            self.b = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
            self.bn_b = nn.BatchNorm2d(c_out)
            self.skip = (nn.Sequential() if stride == 1 and c_in == c_out else
                         nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                       nn.BatchNorm2d(c_out)))

        def forward(self, x):
            return F.relu(self.bn_b(self.b(F.relu(self.bn_a(self.a(x))))) + self.skip(x))

    def backbone():
        layers, c = [nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU()], 32
        for c_out, stride in ((32, 1), (64, 2), (128, 2), (256, 2)):
            layers += [Block(c, c_out, stride), Block(c_out, c_out, 1)]
            c = c_out
        return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())

    state = {}

    def build(torch):
        model = nn.Sequential(backbone(), nn.Dropout(0.2), nn.Linear(256, CLASSES))
        state["model"] = model
        head = model[2].parameters()
        return model, torch.optim.AdamW(head, lr=1e-3)

    def fetch(folder):
        buf = io.BytesIO()
        torch.save(backbone().state_dict(), buf)
        _job.write_shard(folder, "backbone.pt", buf.getvalue())
        protos = rng.integers(0, 256, (CLASSES, RAW, RAW, 3)).astype(np.float32)
        for s in range(8):
            n = n_images // 8
            y = rng.integers(0, CLASSES, n)
            x = 0.6 * protos[y] + 0.4 * rng.integers(0, 256, (n, RAW, RAW, 3))
            shard = io.BytesIO()
            np.savez(shard, x=x.astype(np.uint8), y=y)
            _job.write_shard(folder, f"images-{s}.npz", shard.getvalue())

    def preprocess(folder):
        model = state["model"]
        model[0].load_state_dict(torch.load(os.path.join(folder, "backbone.pt")))
        for p_ in model[0].parameters():
            p_.requires_grad_(False)
        xs, ys = [], []
        for s in range(8):
            with np.load(os.path.join(folder, f"images-{s}.npz")) as z:
                img = torch.from_numpy(z["x"]).permute(0, 3, 1, 2).float() / 255
                xs.append(F.interpolate(img, size=(SIZE, SIZE), mode="bilinear",
                                        align_corners=False))
                ys.append(torch.from_numpy(z["y"]))
        x, y = torch.cat(xs), torch.cat(ys)
        x = (x - x.mean((0, 2, 3), keepdim=True)) / x.std((0, 2, 3), keepdim=True)
        n_val = len(x) // 8
        return {"train": Flipped(x[2 * n_val:], y[2 * n_val:]), "val": (x[:n_val], y[:n_val]),
                "test": (x[n_val:2 * n_val], y[n_val:2 * n_val])}

    class Flipped(Dataset):
        def __init__(self, x, y):
            self.x, self.y = x, y

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            img = self.x[i]
            return (img.flip(-1) if torch.rand(1).item() < 0.5 else img), self.y[i]

    def make_loader(train):
        return _common.loader(args, train, 32, shuffle=True, drop_last=True,
                              generator=torch.Generator().manual_seed(args.seed))

    def on_epoch(epoch):
        """After the frozen epochs: the whole network, at a tenth of the head's rate."""
        if epoch == args.freeze_epochs + 1:
            model = state["model"]
            for p_ in model[0].parameters():
                p_.requires_grad_(True)
            opt.add_param_group({"params": list(model[0].parameters()), "lr": 1e-4})
            print(f"[{NAME}] unfrozen at epoch {epoch}", file=sys.stderr, flush=True)

    train_loss = _job.supervised(F.cross_entropy)
    eval_batches = _job.pair_batches(64)

    model, opt = None, None

    def build_and_keep(torch_):
        nonlocal model, opt
        model, opt = build(torch_)
        return model, opt

    return _job.run(NAME, args, build=build_and_keep, fetch=fetch, preprocess=preprocess,
                    train_loss=train_loss, score=lambda m, b: float(train_loss(m, b)),
                    make_loader=make_loader, eval_batches=eval_batches, torch=torch,
                    on_epoch=on_epoch)


if __name__ == "__main__":
    sys.exit(main())

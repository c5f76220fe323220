"""A tabular MLP with heavy preprocessing (CPU), with the phases of a real training job (see
``_job.py``): most of its CPU goes to turning CSV text into features, as in pandas jobs.

    python e2e/workloads/tabular.py --duration 200 --epochs 5 --phase-log phases.csv

``datagen`` writes an event log as CSV shards (``--scale`` x 1,000,000 rows: user, timestamp,
category, amount, device, label), fsynced. ``preprocess`` parses every row with the csv module,
then does what a pandas pipeline would: per-user group-by aggregates (count, mean, max of
amounts, distinct categories) joined back onto each row, hour-of-day from the timestamp, one-hot
encoded categories and devices, standardised numeric columns. The model is a 4-layer MLP
classifier on the result.
"""

from __future__ import annotations

import csv
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
import _job  # noqa: E402

NAME = "tabular"
CATEGORIES = [f"cat{i:02d}" for i in range(24)]
DEVICES = ["android", "ios", "web", "desktop", "tv"]


def main(argv=None) -> int:
    p = _job.parser(__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=256, help="hidden units (default 256)")
    args = p.parse_args(argv)
    torch = _common.setup_torch(args.threads)
    import numpy as np
    from torch import nn
    from torch.utils.data import TensorDataset

    rng = np.random.default_rng(args.seed)
    rows = max(20_000, int(1_000_000 * args.scale))
    users = max(500, rows // 40)
    shards = 10

    def build(torch):
        n_in = 8 + len(CATEGORIES) + len(DEVICES) + 24
        layers, width = [], n_in
        for _ in range(4):
            layers += [nn.Linear(width, args.width), nn.BatchNorm1d(args.width), nn.ReLU()]
            width = args.width
        model = nn.Sequential(*layers, nn.Linear(width, 2))
        return model, torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)

    def fetch(folder):
        taste = rng.integers(0, len(CATEGORIES), users)
        for s in range(shards):
            n = rows // shards
            user = rng.integers(0, users, n)
            cat = np.where(rng.random(n) < 0.6, taste[user], rng.integers(0, len(CATEGORIES), n))
            amount = rng.lognormal(3, 1, n) * (1 + cat / 10)
            ts = 1_700_000_000 + rng.integers(0, 90 * 86400, n)
            dev = rng.integers(0, len(DEVICES), n)
            label = (amount > 80) & (cat % 3 == 0) | (rng.random(n) < 0.05)
            buf = io.StringIO()
            w = csv.writer(buf)
            w.writerow(["user", "timestamp", "category", "amount", "device", "label"])
            for row in zip(user, ts, cat, amount, dev, label):
                w.writerow([f"u{row[0]}", row[1], CATEGORIES[row[2]], f"{row[3]:.2f}",
                            DEVICES[row[4]], int(row[5])])
            _job.write_shard(folder, f"events-{s:02d}.csv", buf.getvalue().encode())

    def preprocess(folder):
        cat_ix = {c: i for i, c in enumerate(CATEGORIES)}
        dev_ix = {d: i for i, d in enumerate(DEVICES)}
        user, ts, cat, amount, dev, label = [], [], [], [], [], []
        for f in sorted(os.listdir(folder)):
            with open(os.path.join(folder, f), newline="") as fh:
                r = csv.reader(fh)
                next(r)
                for u, t, c, a, d, y in r:
                    user.append(int(u[1:]))
                    ts.append(int(t))
                    cat.append(cat_ix[c])
                    amount.append(float(a))
                    dev.append(dev_ix[d])
                    label.append(int(y))
        user, ts, cat = np.array(user), np.array(ts), np.array(cat)
        amount, dev, label = np.array(amount), np.array(dev), np.array(label)
        # group-by user: count, mean, max, distinct categories; joined back onto the rows
        uniq, inv, count = np.unique(user, return_inverse=True, return_counts=True)
        mean = np.bincount(inv, amount) / count
        peak = np.zeros(len(uniq))
        np.maximum.at(peak, inv, amount)
        distinct = np.bincount(np.unique(inv * len(CATEGORIES) + cat) // len(CATEGORIES),
                               minlength=len(uniq))
        hour = (ts // 3600) % 24
        numeric = np.column_stack([np.log1p(amount), count[inv], mean[inv], peak[inv],
                                   distinct[inv], amount / mean[inv], ts % 86400 / 86400,
                                   (ts - ts.min()) / 86400])
        numeric = (numeric - numeric.mean(0)) / (numeric.std(0) + 1e-9)
        onehot = np.zeros((len(user), len(CATEGORIES) + len(DEVICES) + 24), np.float32)
        onehot[np.arange(len(user)), cat] = 1
        onehot[np.arange(len(user)), len(CATEGORIES) + dev] = 1
        onehot[np.arange(len(user)), len(CATEGORIES) + len(DEVICES) + hour] = 1
        x = torch.from_numpy(np.hstack([numeric.astype(np.float32), onehot]))
        y = torch.from_numpy(label)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(args.seed))
        x, y = x[order], y[order]
        n_val = len(x) // 10
        return {"train": TensorDataset(x[2 * n_val:], y[2 * n_val:]),
                "val": (x[:n_val], y[:n_val]), "test": (x[n_val:2 * n_val], y[n_val:2 * n_val])}

    def make_loader(train):
        return _common.loader(args, train, 512, shuffle=True, drop_last=True,
                              generator=torch.Generator().manual_seed(args.seed))

    loss_fn = nn.CrossEntropyLoss()

    train_loss = _job.supervised(loss_fn)
    eval_batches = _job.pair_batches(2048)

    return _job.run(NAME, args, build=build, fetch=fetch, preprocess=preprocess,
                    train_loss=train_loss, score=lambda m, b: float(train_loss(m, b)),
                    make_loader=make_loader, eval_batches=eval_batches, torch=torch)


if __name__ == "__main__":
    sys.exit(main())

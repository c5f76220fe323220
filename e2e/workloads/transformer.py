"""A small transformer language model trained on generated token sequences (CPU), with the
phases of a real training job.

    python e2e/workloads/transformer.py --duration 60 --epochs 2 --phase-log phases.csv

The "corpus" comes from a fixed random recurrence (the next token is a function of the two
before it, plus occasional noise), so the model has something to learn. Phases (one stderr
line each, ``[transformer] phase=... t=...``): ``startup`` (imports, model), ``datagen``
(tokenising the corpus into sequences chunk by chunk: memory grows, ~65 MB per ``--scale``),
``train`` (AdamW steps on next-token loss, batches from DataLoader worker processes),
``validate`` (perplexity on held-out sequences, lighter CPU), ``checkpoint`` (model + optimizer
snapshot through ``torch.save``) and ``evaluate`` (training data dropped, test perplexity).
"""

from __future__ import annotations

import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

NAME = "transformer"
VOCAB = 2048
SEQ = 64
D_MODEL = 256


def main(argv=None) -> int:
    args = _common.parser(__doc__.splitlines()[0]).parse_args(argv)
    phases = _common.PhaseReporter(NAME, args.phase_log)
    phases.enter("startup")
    torch = _common.setup_torch(args.threads)
    from torch import nn
    from torch.utils.data import Dataset

    g = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, D_MODEL)
            self.pos = nn.Parameter(torch.randn(SEQ, D_MODEL) * 0.02)
            layer = nn.TransformerEncoderLayer(D_MODEL, nhead=4, dim_feedforward=4 * D_MODEL,
                                               dropout=0.1, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
            self.head = nn.Linear(D_MODEL, VOCAB)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ))

        def forward(self, tokens):
            h = self.embed(tokens) + self.pos[:tokens.shape[1]]
            n = tokens.shape[1]
            return self.head(self.encoder(h, mask=self.mask[:n, :n], is_causal=True))

    model = LM()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    loss_fn = nn.CrossEntropyLoss()
    plan = _common.Plan.for_run(args.duration - (time.time() - _common.START), args.epochs,
                                args.eval_every, args.checkpoint_every)

    # ------------------------------------------------------------------ datagen
    phases.enter("datagen")
    n_train = max(256, int(120_000 * args.scale))
    n_val = n_test = max(64, n_train // 20)
    a, b = (int(v) for v in torch.randint(1, VOCAB, (2,), generator=g))

    def generate(n: int, share: float):
        """n sequences of SEQ + 1 tokens, in chunks paced over share x the datagen time."""
        chunks, out = 12, []
        per_chunk = plan.datagen * share / chunks
        for i in range(chunks):
            t0 = time.monotonic()
            m = n // chunks + (1 if i < n % chunks else 0)
            seq = torch.empty(m, SEQ + 1, dtype=torch.long)
            seq[:, :2] = torch.randint(0, VOCAB, (m, 2), generator=g)
            for t in range(2, SEQ + 1):
                seq[:, t] = (a * seq[:, t - 1] + b * seq[:, t - 2] + 7) % VOCAB
            noisy = torch.rand(m, SEQ + 1, generator=g) < 0.05
            seq[noisy] = torch.randint(0, VOCAB, (int(noisy.sum()),), generator=g)
            out.append(seq)
            time.sleep(max(0.0, per_chunk - (time.monotonic() - t0)))
        return torch.cat(out)

    train_seq = generate(n_train, 0.8)
    val_seq = generate(n_val, 0.1)
    test_seq = generate(n_test, 0.1)

    class Windows(Dataset):
        """Sequences cropped at a random start (the workers' per-sample work)."""

        def __init__(self, seq):
            self.seq = seq

        def __len__(self):
            return len(self.seq)

        def __getitem__(self, i):
            s = self.seq[i]
            return s[:-1].clone(), s[1:].clone()

    train_loader = _common.loader(args, Windows(train_seq), 16, shuffle=True, generator=g)
    ckpt = _common.Checkpointer(args.checkpoint_dir)

    def perplexity(seq, seconds: float, duty: float) -> float:
        model.eval()
        pacer, total, count = _common.Pacer(duty), 0.0, 0
        with torch.no_grad():
            for chunk in _common.timeboxed(lambda: seq.split(32), seconds):
                logits = model(chunk[:, :-1])
                total += float(loss_fn(logits.reshape(-1, VOCAB), chunk[:, 1:].reshape(-1)))
                count += 1
                pacer.step()
        model.train()
        return math.exp(total / max(1, count))

    try:
        for epoch in range(1, args.epochs + 1):
            phases.enter("train", epoch=epoch)
            pacer, losses = _common.Pacer(args.duty), []
            for x, y in _common.timeboxed(lambda: train_loader, plan.train):
                opt.zero_grad()
                loss = loss_fn(model(x).reshape(-1, VOCAB), y.reshape(-1))
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                losses.append(loss.item())
                pacer.step()
            _common.end_of_epoch(NAME, args, phases, ckpt, model, opt, plan, epoch, losses,
                                 lambda s, d: f"val ppl {perplexity(val_seq, s, d):.1f}")

        phases.enter("evaluate")
        del train_loader, train_seq  # the job is done with its training data
        import gc

        gc.collect()
        ppl = perplexity(test_seq, plan.evaluate, 0.5)
        print(f"[{NAME}] test ppl {ppl:.1f}", file=sys.stderr, flush=True)
    finally:
        ckpt.close()
    phases.enter("done")
    phases.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

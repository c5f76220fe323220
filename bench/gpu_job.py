"""A small real PyTorch CUDA job for bench/gpu_check.sh's ``ai4dl record`` check: this process
starts a child that allocates ~1 GiB on the GPU and multiplies matrices for ``SECONDS``
(argv[1], default 6), so the recorded tree is a parent without GPU work and a child with it."""

import subprocess
import sys
import time

CHILD = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda")      # 256 MiB each, ~1 GiB with b, c and the pool
b = torch.randn(8192, 8192, device="cuda")
end = time.time() + float(sys.argv[1])
n = 0
while time.time() < end:
    c = a @ b
    n += 1
    if n % 20 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
print(f"gpu_job child: {n} products of 8192x8192 in {sys.argv[1]} s", flush=True)
"""

if __name__ == "__main__":
    seconds = sys.argv[1] if len(sys.argv) > 1 else "6"
    time.sleep(0.5)   # a first sample of the parent alone
    sys.exit(subprocess.run([sys.executable, "-c", CHILD, seconds]).returncode)

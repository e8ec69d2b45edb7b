"""Exit status of a process that imported torch and aotkernels and ran ops (registered with
torch or not, as argv[1] says): 0 means the interpreter shut down cleanly."""

import sys

import aotkernels as ak

if sys.argv[1:] == ["unregistered"]:
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_AfterTorchImport"]
import torch

x = torch.randn(64, 64, device="cuda")
ak.relu(x)
ak.rms_norm(x, torch.ones(64, device="cuda"))
ak.matmul(x.bfloat16(), x.bfloat16())
torch.cuda.synchronize()
print("ran", sys.argv[1:], flush=True)

"""Writes a reference fixture in the format tests/model/reference_fixture.h reads.

  fixture.json  {**header, "tensors": [{"name", "shape", "dtype" ("f32"|"i32"), "offset",
                 "nbytes"}]}
  fixture.bin   little-endian: every parameter under its name, every gradient under
                "grad/<name>", then "inputs" and "targets" as int32 [B, T], then any extra
                tensors (the Llama script's "logits" [B, T, vocab]).
"""

import json
import os

import torch


def write_fixture(out, model, inputs, targets, header, extra=None):
    """Writes the model's parameters and gradients, the batch, any extra tensors by name, and
    header; returns the count."""
    records = [(name, p.detach()) for name, p in model.named_parameters()]
    records += [("grad/" + name, p.grad.detach()) for name, p in model.named_parameters()]
    records += [("inputs", inputs.to(torch.int32)), ("targets", targets.to(torch.int32))]
    records += list((extra or {}).items())
    os.makedirs(out, exist_ok=True)
    tensors = []
    offset = 0
    with open(os.path.join(out, "fixture.bin"), "wb") as f:
        for name, t in records:
            t = t.contiguous()
            if t.dtype == torch.float32:
                dtype, np_dtype = "f32", "<f4"
            elif t.dtype == torch.int32:
                dtype, np_dtype = "i32", "<i4"
            else:
                raise TypeError(f"{name}: unexpected dtype {t.dtype}")
            data = t.numpy().astype(np_dtype, copy=False).tobytes()
            f.write(data)
            tensors.append({"name": name, "shape": list(t.shape), "dtype": dtype,
                            "offset": offset, "nbytes": len(data)})
            offset += len(data)
    with open(os.path.join(out, "fixture.json"), "w") as f:
        json.dump({**header, "tensors": tensors}, f, indent=1)
    return len(tensors)

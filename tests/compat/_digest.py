"""What the compatibility scripts print as their result: a digest of tensors (bit for
bit) and floats at full precision. Not part of any job: a test helper they import."""

import hashlib

import torch


def digest(obj) -> str:
    """A short hash of every tensor in a state_dict, a module or a tensor, bit for bit."""
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if isinstance(obj, torch.Tensor):
        obj = {"t": obj}
    h = hashlib.sha256()
    for key in sorted(obj):
        value = obj[key]
        h.update(key.encode())
        if isinstance(value, torch.Tensor):
            v = value.detach().cpu().contiguous()
            h.update(str(v.dtype).encode() + str(tuple(v.shape)).encode())
            h.update(v.view(torch.uint8).numpy().tobytes() if v.numel() else b"")
        else:
            h.update(repr(value).encode())
    return h.hexdigest()[:16]

"""The modules behind :mod:`models.attention`; importing this imports torch."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

D_MODEL = 8
HEADS = 2


class PaddedEncoder(nn.Module):
    """A two-layer ``nn.TransformerEncoder`` fed a key-padding mask (nested-tensor fast path in eval)."""

    def __init__(self, nested: bool = True) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, 16, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=nested)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        return self.encoder(x, src_key_padding_mask=pad)


class PaddedEncoderZeroed(PaddedEncoder):
    """The same encoder, with padded positions zeroed explicitly after it: both paths agree."""

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        out = self.encoder(x, src_key_padding_mask=pad)
        return out.masked_fill(pad.unsqueeze(-1), 0.0)


class MaskedSdpa(nn.Module):
    """``F.scaled_dot_product_attention`` with a boolean keep-mask (True = attend)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class MaskedSdpaZeroed(MaskedSdpa):
    """The same attention, with rows that keep no key zeroed explicitly."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.masked_fill(~mask.any(-1, keepdim=True), 0.0)


class GqaSdpa(nn.Module):
    """Grouped-query attention: 4 query heads share 2 key/value heads via ``enable_gqa=True``."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


class GqaSdpaRepeat(nn.Module):
    """The same attention with the key/value heads repeated explicitly (what ``enable_gqa`` does)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        groups = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(groups, dim=-3)
        v = v.repeat_interleave(groups, dim=-3)
        return F.scaled_dot_product_attention(q, k, v)


class Sdpa3d(nn.Module):
    """``F.scaled_dot_product_attention`` on 3-D ``(batch, seq, dim)`` tensors (no head dimension)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Sdpa3dAs4d(nn.Module):
    """The same attention with a head dimension of 1 added and removed around the call."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = F.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), is_causal=True)
        return out.squeeze(1)


class RmsNorm(nn.Module):
    """``nn.RMSNorm`` over the last dimension, then a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(D_MODEL, eps=1e-6)
        self.fc = nn.Linear(D_MODEL, 4)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.norm(x))


class RmsNormManual(RmsNorm):
    """The same layer with RMSNorm written out: ``x * rsqrt(mean(x²) + eps) * weight``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        eps = self.norm.eps if self.norm.eps is not None else 1e-6
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * self.norm.weight
        return self.fc(y)

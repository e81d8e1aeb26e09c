"""Moving a model's streamed weights into one huge-page mapping
(`infini.ops.models.huge_pages`)."""

import mmap

import pytest
import torch

from infini.ops.models import LlamaModel, huge_pages
from tests.test_model_llama import (  # noqa: F401 - `tiny_llama` is a fixture
    checkpoint_from_transformers,
    tiny_llama,
)

pytestmark = pytest.mark.smoke

needs_huge_pages = pytest.mark.skipif(
    not huge_pages.huge_pages_available(),
    reason="no transparent huge pages here (MADV_HUGEPAGE or THP mode)",
)


@needs_huge_pages
def test_moved_tensors_keep_their_values_views_and_sharing():
    base = torch.randn(300, 70)
    row = base[3]  # A view of `base`: it must still alias `base` after.
    halves = torch.randn(1000, dtype=torch.float64)[1::2]
    blocks = torch.randint(0, 256, (123,), dtype=torch.uint8)
    sixteen = torch.randn(5, 8).to(torch.bfloat16).t()
    tensors = [base, row, halves, blocks, sixteen, base]
    expected = [t.clone() for t in tensors]
    shapes = [(t.shape, t.stride()) for t in tensors]
    # Whole storages move: the float64 one is 1000 elements.
    assert huge_pages.move_to_huge_pages(tensors) >= 300 * 70 * 4 + 1000 * 8
    for tensor, value, (shape, stride) in zip(tensors, expected, shapes, strict=True):
        assert torch.equal(tensor, value)
        assert (tensor.shape, tensor.stride()) == (shape, stride)
    # One mapping, aligned to a huge page, holding every tensor.
    storage = base.untyped_storage()
    assert all(t.untyped_storage().data_ptr() == storage.data_ptr() for t in tensors)
    # The first storage starts the mapping's aligned part.
    assert base.data_ptr() % huge_pages.HUGE_PAGE == 0
    base[3, 5] = 42.0
    assert row[5].item() == 42.0


def test_nothing_moves_without_huge_pages(monkeypatch):
    monkeypatch.delattr(mmap, "MADV_HUGEPAGE", raising=False)
    tensor = torch.randn(16)
    address = tensor.data_ptr()
    assert huge_pages.move_to_huge_pages([tensor]) == 0
    assert tensor.data_ptr() == address


@needs_huge_pages
def test_a_cpu_models_streamed_weights_share_one_mapping(tiny_llama):  # noqa: F811
    model = LlamaModel(checkpoint_from_transformers(tiny_llama), max_seq_len=32)
    weights = model.streamed_weights()
    assert len({w.untyped_storage().data_ptr() for w in weights}) == 1
    assert model.weight_bytes_per_token() == sum(
        w.numel() * w.element_size() for w in weights
    )

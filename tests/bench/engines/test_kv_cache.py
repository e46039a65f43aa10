"""The paged KV cache: allocator, block tables, slot mapping, rollback."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from samspec_bench.bench.engines.kv_cache import BlockAllocator, NoFreeBlocks, PagedKVCache


def make_cache(num_blocks=8, block_size=4, layers=2, heads=2, dim=3, dtype=torch.float32):
    return PagedKVCache(layers, heads, dim, num_blocks=num_blocks, block_size=block_size, dtype=dtype)


def test_allocator_hands_out_every_block_once_and_refuses_double_free():
    a = BlockAllocator(3)
    got = {a.allocate() for _ in range(3)}
    assert got == {0, 1, 2} and a.num_free == 0
    with pytest.raises(NoFreeBlocks):
        a.allocate()
    a.free(1)
    assert a.allocate() == 1
    a.free(1)
    with pytest.raises(ValueError, match="not allocated"):
        a.free(1)


def test_slot_mapping_follows_the_block_table():
    c = make_cache(block_size=4)
    c.add("x")
    c.add("y")
    sx = c.append("x", 3)            # x: block 0
    sy = c.append("y", 5)            # y: blocks 1, 2
    sx += c.append("x", 3)           # x: block 0, then block 3
    tx, ty = c.block_table("x"), c.block_table("y")
    assert len(tx) == 2 and len(ty) == 2 and not set(tx) & set(ty)
    assert sx == [tx[p // 4] * 4 + p % 4 for p in range(6)]
    assert sy == [ty[p // 4] * 4 + p % 4 for p in range(5)]
    assert c.seq_len("x") == 6 and c.seq_len("y") == 5
    c.check()
    bt = c.block_tables_tensor(["x", "y"], pad=0)
    assert bt.tolist() == [tx, ty]


def test_blocks_are_allocated_only_when_a_block_boundary_is_crossed():
    c = make_cache(block_size=4)
    c.add("s")
    assert c.blocks_needed("s", 4) == 1 and c.blocks_needed("s", 5) == 2
    c.append("s", 4)
    assert c.num_free_blocks == 7 and c.blocks_needed("s", 0) == 0 and c.blocks_needed("s", 1) == 1


def test_append_that_does_not_fit_changes_nothing():
    c = make_cache(num_blocks=2, block_size=4)
    c.add("s")
    c.append("s", 5)
    assert not c.can_append("s", 4)
    with pytest.raises(NoFreeBlocks):
        c.append("s", 4)
    assert c.seq_len("s") == 5 and c.num_free_blocks == 0
    c.check()


def test_rollback_frees_blocks_and_the_next_tokens_overwrite_the_rejected_ones():
    torch.manual_seed(0)
    c = make_cache(num_blocks=8, block_size=4)
    c.add("s")
    k = torch.randn(9, 2, 3)
    v = torch.randn(9, 2, 3)
    slots = torch.tensor(c.append("s", 7))
    for layer in range(2):
        c.write(layer, slots, k[:7], v[:7])
    # a verify step writes 4 more positions (1 pending token + 3 drafts); all are rejected
    junk = torch.randn(4, 2, 3) * 100
    s2 = torch.tensor(c.append("s", 4))
    for layer in range(2):
        c.write(layer, s2, junk, junk)
    assert len(c.block_table("s")) == 3
    c.truncate("s", 7)
    assert c.seq_len("s") == 7 and len(c.block_table("s")) == 2
    c.check()
    s3 = torch.tensor(c.append("s", 2))
    for layer in range(2):
        c.write(layer, s3, k[7:9], v[7:9])
    for layer in range(2):
        gk, gv = c.gather(layer, "s")
        assert torch.equal(gk, k) and torch.equal(gv, v)
    c.rollback("s", 9)
    assert c.seq_len("s") == 0 and c.block_table("s") == [] and c.num_free_blocks == 8
    with pytest.raises(ValueError):
        c.truncate("s", 1)


def test_free_returns_every_block():
    c = make_cache(num_blocks=4, block_size=2)
    for s in "abc":
        c.add(s)
        c.append(s, 2)
    c.free("b")
    assert c.num_free_blocks == 2 and "b" not in c
    with pytest.raises(ValueError, match="already"):
        c.add("a")
    c.check()


def test_write_casts_to_the_cache_dtype():
    c = make_cache(dtype=torch.bfloat16)
    c.add(0)
    slots = torch.tensor(c.append(0, 2))
    x = torch.randn(2, 2, 3)
    c.write(0, slots, x, x)
    assert torch.equal(c.gather(0, 0)[0], x.to(torch.bfloat16))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "append", "truncate", "free"]), st.integers(0, 3),
                          st.integers(0, 9)), max_size=40))
def test_random_operations_keep_tables_and_allocator_consistent(ops):
    c = make_cache(num_blocks=10, block_size=3)
    lens: dict[int, int] = {}
    for op, sid, n in ops:
        if op == "add" and sid not in lens:
            c.add(sid)
            lens[sid] = 0
        elif op == "append" and sid in lens:
            if c.can_append(sid, n):
                slots = c.append(sid, n)
                assert len(slots) == n and len(set(slots)) == n
                lens[sid] += n
            else:
                with pytest.raises(NoFreeBlocks):
                    c.append(sid, n)
        elif op == "truncate" and sid in lens:
            new = min(n, lens[sid])
            c.truncate(sid, new)
            lens[sid] = new
        elif op == "free" and sid in lens:
            c.free(sid)
            del lens[sid]
        c.check()
        assert {s: c.seq_len(s) for s in c.sequences} == lens
        used = sum(-(-x // 3) for x in lens.values())
        assert c.num_free_blocks == 10 - used
    # every slot of every live sequence is distinct across sequences
    all_slots = [s for sid in lens for s in c.slots(sid, 0, lens[sid])]
    assert len(all_slots) == len(set(all_slots))


def test_move_positions_copies_every_layer_and_reads_before_writing():
    cache = PagedKVCache(2, 1, 2, num_blocks=4, block_size=2)
    cache.add("s")
    slots = torch.tensor(cache.append("s", 6))
    for layer in range(2):
        vals = torch.arange(6, dtype=torch.float32)[:, None, None].expand(6, 1, 2) + 10 * layer
        cache.write(layer, slots, vals, -vals)
    cache.move_positions("s", [(4, 2), (2, 3)])   # position 3 gets 2's OLD value, not the 4 just moved there
    for layer in range(2):
        k, v = cache.gather(layer, "s")
        assert k[:, 0, 0].tolist() == [x + 10 * layer for x in (0, 1, 4, 2, 4, 5)]
        assert torch.equal(v, -k)

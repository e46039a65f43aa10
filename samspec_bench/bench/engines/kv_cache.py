"""A paged KV cache: fixed-size blocks, a block allocator, one block table per sequence,
slot mapping for the tokens a step writes, and rollback of rejected speculative tokens.

Layout (the one vLLM's flash-attention backends and vLLM-Ascend use): per layer, a key cache
and a value cache of shape `[num_blocks, block_size, num_kv_heads, head_dim]`. Token `i` of a
sequence lives in block `block_table[i // block_size]` at offset `i % block_size`, i.e. in the
flat slot `block_table[i // block_size] * block_size + i % block_size`.

Rollback only moves a sequence's length back and frees the blocks it no longer reaches: the
stale keys/values stay in memory, are never read (attention masks by sequence length) and are
overwritten by the next tokens written at those slots.

torch is imported by the module: import it from code that runs a model, never from the CLI.
"""

from __future__ import annotations

from typing import Hashable, Sequence

import torch


class NoFreeBlocks(RuntimeError):
    """The cache has no free block left for a sequence that needs one."""


class BlockAllocator:
    """Hands out block ids 0..num_blocks-1. Freed blocks are reused first (LIFO), which keeps the
    working set small; the order never affects results."""

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks = {num_blocks}: need at least one block")
        self.num_blocks = int(num_blocks)
        self._free = list(range(self.num_blocks - 1, -1, -1))  # pop() gives 0, 1, 2, ...
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self._used)

    def allocate(self) -> int:
        if not self._free:
            raise NoFreeBlocks(f"all {self.num_blocks} KV-cache blocks are in use")
        block = self._free.pop()
        self._used.add(block)
        return block

    def free(self, block: int) -> None:
        if block not in self._used:
            raise ValueError(f"block {block} is not allocated (double free?)")
        self._used.remove(block)
        self._free.append(block)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class PagedKVCache:
    """Per-layer paged key/value tensors plus the per-sequence block tables and lengths."""

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, *, num_blocks: int,
                 block_size: int = 16, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu"):
        if block_size < 1:
            raise ValueError(f"block_size = {block_size}: must be >= 1")
        self.num_layers = int(num_layers)
        self.num_kv_heads = int(num_kv_heads)
        self.head_dim = int(head_dim)
        self.block_size = int(block_size)
        self.dtype = dtype
        self.device = torch.device(device)
        self.allocator = BlockAllocator(num_blocks)
        shape = (num_blocks, self.block_size, self.num_kv_heads, self.head_dim)
        # Zero-initialised: slots that were never written are read (and masked) when a block
        # table is padded; zeros keep 0 * value finite where uninitialised memory might be NaN.
        self.key_caches = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]
        self.value_caches = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]
        self._tables: dict[Hashable, list[int]] = {}
        self._lens: dict[Hashable, int] = {}

    # --- sizes -------------------------------------------------------------------------------

    @property
    def num_blocks(self) -> int:
        return self.allocator.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.allocator.num_free

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()

    def memory_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.key_caches + self.value_caches)

    # --- sequences ---------------------------------------------------------------------------

    def add(self, seq_id: Hashable) -> None:
        if seq_id in self._tables:
            raise ValueError(f"sequence {seq_id!r} is already in the KV cache")
        self._tables[seq_id] = []
        self._lens[seq_id] = 0

    def __contains__(self, seq_id: Hashable) -> bool:
        return seq_id in self._tables

    @property
    def sequences(self) -> list[Hashable]:
        return list(self._tables)

    def seq_len(self, seq_id: Hashable) -> int:
        return self._lens[seq_id]

    def block_table(self, seq_id: Hashable) -> list[int]:
        return list(self._tables[seq_id])

    def blocks_needed(self, seq_id: Hashable, num_tokens: int) -> int:
        """New blocks that appending `num_tokens` to the sequence would allocate."""
        have = len(self._tables[seq_id]) if seq_id in self._tables else 0
        length = self._lens.get(seq_id, 0)
        return max(0, cdiv(length + num_tokens, self.block_size) - have)

    def can_append(self, seq_id: Hashable, num_tokens: int) -> bool:
        return self.blocks_needed(seq_id, num_tokens) <= self.num_free_blocks

    def append(self, seq_id: Hashable, num_tokens: int) -> list[int]:
        """Reserve `num_tokens` more positions for the sequence (allocating blocks as needed)
        and return their flat slot ids. Raises NoFreeBlocks, changing nothing, when the cache
        cannot hold them."""
        if num_tokens < 0:
            raise ValueError(f"num_tokens = {num_tokens}: must be >= 0")
        need = self.blocks_needed(seq_id, num_tokens)
        if need > self.num_free_blocks:
            raise NoFreeBlocks(f"sequence {seq_id!r} needs {need} more blocks, {self.num_free_blocks} are free")
        table = self._tables[seq_id]
        for _ in range(need):
            table.append(self.allocator.allocate())
        start = self._lens[seq_id]
        self._lens[seq_id] = start + num_tokens
        bs = self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, start + num_tokens)]

    def truncate(self, seq_id: Hashable, new_len: int) -> None:
        """Roll the sequence back to its first `new_len` tokens (rejected drafts); blocks past
        the new end go back to the allocator."""
        length = self._lens[seq_id]
        if not 0 <= new_len <= length:
            raise ValueError(f"cannot truncate sequence {seq_id!r} of length {length} to {new_len}")
        table = self._tables[seq_id]
        keep = cdiv(new_len, self.block_size)
        while len(table) > keep:
            self.allocator.free(table.pop())
        self._lens[seq_id] = new_len

    def rollback(self, seq_id: Hashable, num_tokens: int) -> None:
        """Drop the last `num_tokens` tokens of the sequence."""
        self.truncate(seq_id, self._lens[seq_id] - num_tokens)

    def free(self, seq_id: Hashable) -> None:
        for block in self._tables.pop(seq_id):
            self.allocator.free(block)
        del self._lens[seq_id]

    # --- tensors for a step ------------------------------------------------------------------

    def block_tables_tensor(self, seq_ids: Sequence[Hashable], pad: int = 0) -> torch.Tensor:
        """`[len(seq_ids), max_blocks]` int64 block tables, padded with `pad`."""
        tables = [self._tables[s] for s in seq_ids]
        width = max((len(t) for t in tables), default=0)
        out = torch.full((len(tables), max(width, 1)), pad, dtype=torch.long)
        for i, t in enumerate(tables):
            if t:
                out[i, : len(t)] = torch.tensor(t, dtype=torch.long)
        return out.to(self.device)

    def write(self, layer: int, slot_mapping: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        """Store `key`/`value` `[num_tokens, num_kv_heads, head_dim]` at the flat slots."""
        kc = self.key_caches[layer].view(-1, self.num_kv_heads, self.head_dim)
        vc = self.value_caches[layer].view(-1, self.num_kv_heads, self.head_dim)
        kc.index_copy_(0, slot_mapping, key.to(self.dtype))
        vc.index_copy_(0, slot_mapping, value.to(self.dtype))

    def move_positions(self, seq_id: Hashable, moves: Sequence[tuple[int, int]]) -> None:
        """Copy the keys and values of positions `src` to positions `dst` of the sequence, for
        every (src, dst) and every layer (all sources read before any is written)."""
        if not moves:
            return
        src = torch.tensor([self.slots(seq_id, a, a + 1)[0] for a, _ in moves], dtype=torch.long, device=self.device)
        dst = torch.tensor([self.slots(seq_id, b, b + 1)[0] for _, b in moves], dtype=torch.long, device=self.device)
        for cache in (*self.key_caches, *self.value_caches):
            flat = cache.view(-1, self.num_kv_heads, self.head_dim)
            flat.index_copy_(0, dst, flat[src])   # advanced indexing copies the sources first

    def gather(self, layer: int, seq_id: Hashable) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequence's keys and values `[seq_len, num_kv_heads, head_dim]` (for tests)."""
        slots = torch.tensor(self.slots(seq_id, 0, self._lens[seq_id]), dtype=torch.long, device=self.device)
        kc = self.key_caches[layer].view(-1, self.num_kv_heads, self.head_dim)
        vc = self.value_caches[layer].view(-1, self.num_kv_heads, self.head_dim)
        return kc[slots], vc[slots]

    def slots(self, seq_id: Hashable, start: int, stop: int) -> list[int]:
        table, bs = self._tables[seq_id], self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, stop)]

    def check(self) -> None:
        """Internal consistency (for tests): every used block belongs to exactly one sequence,
        and every table is exactly as long as its sequence needs."""
        seen: set[int] = set()
        for seq_id, table in self._tables.items():
            if len(table) != cdiv(self._lens[seq_id], self.block_size):
                raise AssertionError(f"sequence {seq_id!r}: {len(table)} blocks for {self._lens[seq_id]} tokens")
            for b in table:
                if b in seen:
                    raise AssertionError(f"block {b} is shared")
                seen.add(b)
        if seen != self.allocator._used:
            raise AssertionError("allocator and block tables disagree")

